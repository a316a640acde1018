"""`hir run` ingests into the data home (an events-only csv log runs to the end), records runs in its Dagster instance, and reports mistakes in one line; `hir ui` needs nothing on PATH and stops on SIGTERM whatever its parent ignored."""

import duckdb
from hir.cli.main import main
from user_setup import write_events_only


def test_run_ingest_only_records_runs(data_home, monkeypatch, capsys):
    monkeypatch.setenv("HIR_SYNTHETIC_EVENTS", "20000")
    assert main(["run", "--ingest-only"]) == 0
    con = duckdb.connect(str(data_home / "warehouse.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM events").fetchone()[0] > 15000
    con.close()
    import dagster as dg

    with dg.DagsterInstance.from_config(str(data_home / "dagster")) as instance:
        runs = instance.get_runs()
    assert len(runs) == 1 and runs[0].job_name == "ingest_job"
    assert "telemetry" in (data_home / "dagster" / "dagster.yaml").read_text()
    # another seed generates another ecosystem: refused in one line, the warehouse as it was
    monkeypatch.setenv("HIR_SEED", "1")
    capsys.readouterr()
    assert main(["run", "--ingest-only"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "holds another generated world (synthetic seed=0 events=20000)" in err[-1] and "Traceback" not in "\n".join(err)
    con = duckdb.connect(str(data_home / "warehouse.duckdb"), read_only=True)
    assert con.execute("SELECT count(*), count(DISTINCT location) FROM ingest_ledger").fetchone() == (1, 1)
    con.close()


def test_user_mistake_is_one_line(data_home, capsys):
    assert main(["run", "--source", "movielens", "--path", str(data_home / "missing"), "--ingest-only"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("hir run: ") and "Traceback" not in "\n".join(err)
    assert main(["run", "--source", "bogus", "--ingest-only"]) == 2
    assert "unknown source kind 'bogus'" in capsys.readouterr().err


def test_events_only_csv_runs_to_the_end_without_world_knowledge(data_home, tmp_path, monkeypatch, capsys):
    import json

    import dagster as dg
    from hir.cli.bench.faults import SMALL_RUN
    from hir.cli.commands.lookup import lookup
    from hir.serving.feast_store import FeastStore
    from hir.settings import Settings

    for var, value in SMALL_RUN.items():
        monkeypatch.setenv(var, value)
    folder = write_events_only(tmp_path / "shop")
    assert main(["run", "--source", "csv", "--path", str(folder)]) == 0
    artifacts = data_home / "artifacts"
    meta = json.loads((artifacts / "world_knowledge" / "_all" / "meta.json").read_text())
    assert meta["dimension"] == 0 and meta["rows"] == 0
    partition = "2015-05-06"  # the data end on 2015-05-08: one validation and one test day after it
    config = json.loads((artifacts / "hir_encoder" / partition / "config.json").read_text())
    assert config["encoder"]["wk_dim"] == 0
    assert (artifacts / "entity_embeddings" / partition / "embeddings.parquet").exists()
    rows = lookup(FeastStore.from_settings(Settings.from_env()), "user", ["u0", "nobody"])
    assert rows[0]["found"] and len(rows[0]["hir_embedding"]) == int(SMALL_RUN["HIR_TRAIN_DIM"])
    assert not rows[1]["found"]
    with dg.DagsterInstance.from_config(str(data_home / "dagster")) as instance:
        runs = instance.get_runs()
        retried = [e for r in runs for e in instance.all_logs(r.run_id, of_type=dg.DagsterEventType.STEP_UP_FOR_RETRY)]
        wk = instance.get_latest_materialization_event(dg.AssetKey("world_knowledge")).asset_materialization
    assert runs and all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs) and not retried
    assert "without world knowledge" in wk.metadata["empty_because"].value
    capsys.readouterr()
    assert main(["retrieve", "u0", "--k", "3"]) == 0  # the item type the evaluation ranks
    assert "top 3 item" in capsys.readouterr().out
    assert main(["retrieve", "u0", "--type", "ad"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"hir retrieve: no 'ad' entities in bom_tokens partition {partition}; types: item, user"]


def test_ui_starts_dagster_with_its_own_interpreter_whatever_the_path(data_home, monkeypatch):
    import subprocess
    import sys

    calls = []
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(subprocess, "call", lambda cmd, *a, **k: calls.append(cmd) or 0)
    assert main(["ui", "--port", "3999"]) == 0
    assert calls[0][:4] == [sys.executable, "-m", "dagster", "dev"]
    assert calls[0][calls[0].index("-p") + 1] == "3999"


def _deaf() -> None:
    """What a shell without job control, then a Dagster run, leave a background process: SIGINT and
    SIGTERM ignored (and inherited by every process it starts)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def test_ui_started_with_sigterm_ignored_still_stops_on_it(data_home, tmp_path):
    """The test suite under a CI runner's background shell was such a parent: every server it started
    outlived SIGTERM until the SIGKILL 30 s later."""
    import os
    import signal

    from hir.cli.bench.feast import free_port
    from user_setup import HIR, serving

    port = free_port()
    with serving([str(HIR), "ui", "--port", str(port)], dict(os.environ), f"http://127.0.0.1:{port}/server_info",
                 tmp_path / "ui.log", preexec_fn=_deaf) as proc:
        pass
    assert proc.returncode == -signal.SIGTERM
