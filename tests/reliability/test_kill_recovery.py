"""SIGKILL `hir run` during the snapshot and during training, run it again: the outputs equal those of
an uninterrupted run. Runs whose process died free their pool slots (else every later run hangs)."""

import random
import subprocess

import dagster as dg
import pytest
from dagster._core.events import DagsterEvent, DagsterEventType, EngineEventData
from dagster._core.storage.dagster_run import DagsterRun, make_new_run_id
from conftest import CHEAP_BASELINES
from hir.cli.bench.faults import compare, kill_sequence, outputs
from hir.cli.runner import release_dead_runs
from hir.instance import prepare

RUN_TIMEOUT = 1200  # seconds one small `hir run` may take on a loaded 2-core machine


@pytest.fixture(scope="module")
def reference(small_pipeline):
    """The outputs of one uninterrupted small run: the README's ``make run`` (:func:`conftest.small_pipeline`)."""
    return small_pipeline["outputs"]


@pytest.mark.slow
def test_uninterrupted_run_is_consistent(reference):
    assert reference["leftovers"] == [] and reference["broken_parquet"] == []
    assert reference["checkpoint_loads"] and reference["embedding_duplicates"] == 0
    assert reference["online"]["duplicate_rows"] == 0 and reference["online"]["missing_or_different"] == 0
    assert reference["online"]["entities"] == reference["embedding_keys"][0] > 0


@pytest.mark.slow
def test_killed_runs_recover_to_the_reference_outputs(reference, tmp_path):
    home = tmp_path / "killed"
    # Two kills keep the CI budget; `hir bench faults` kills in every step (ingest .. feast_online).
    seq = kill_sequence(home, ["graph_snapshot", "hir_encoder"], random.Random(0), RUN_TIMEOUT, CHEAP_BASELINES)
    assert seq["kills"] == 2
    assert seq["returncode"] == 0, seq["last_line"]
    assert compare(reference, outputs(home)) == []


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_run_whose_process_died_frees_its_pool_slot(settings):
    prepare(settings)
    with dg.DagsterInstance.get() as instance:
        run = instance.add_run(DagsterRun(job_name="j", run_id=make_new_run_id(), status=dg.DagsterRunStatus.STARTED))
        instance.report_dagster_event(DagsterEvent(DagsterEventType.ENGINE_EVENT.value, "j", message="step process",
                                                   event_specific_data=EngineEventData(), pid=_dead_pid()), run.run_id)
        instance.event_log_storage.set_concurrency_slots("duckdb_writer", 1)
        assert instance.event_log_storage.claim_concurrency_slot("duckdb_writer", run.run_id, "ingest").is_claimed
        assert release_dead_runs(instance) == [run.run_id]
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.FAILURE
        assert instance.event_log_storage.get_concurrency_info("duckdb_writer").claimed_slots == []
        assert release_dead_runs(instance) == []
