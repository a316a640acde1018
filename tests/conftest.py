"""Shared fixtures: every test gets its own data home; real public data is read from ../shared/data."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"


def shared_data(name: str) -> Path:
    """Path to a data set in ../shared/data, or skip the test with the reason."""
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(f"real data {path} is absent (see ../shared/data/README.md)")
    return path


@pytest.fixture
def data_home(tmp_path, monkeypatch) -> Path:
    """A fresh data home; HIR_* settings point into it for the test's duration."""
    home = tmp_path / "hir_home"
    home.mkdir()
    # `hir` commands export their flags as HIR_* variables; these undo that after the test.
    for var in ("HIR_SOURCE", "HIR_SOURCE_PATH", "HIR_SYNTHETIC_EVENTS", "HIR_CSV_MAPPING"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HIR_DATA_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    monkeypatch.setenv("DAGSTER_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (home / "dagster").mkdir()
    return home


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op torch thread for a module's tiny models (fastest, and fair on a shared
    machine); the previous count is restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# The small pipeline's two cheap baselines: `hir eval`'s own tests run every one.
CHEAP_BASELINES = {"HIR_EVAL_BASELINES": "popularity,cooccurrence"}


@pytest.fixture(scope="session")
def small_pipeline(tmp_path_factory) -> dict:
    """``make run`` once, as the README says it, into a fresh data home from a PATH without the
    environment (the settings of :data:`hir.cli.bench.faults.SMALL_RUN` with :data:`CHEAP_BASELINES`).

    Shared by the README test, which runs its other commands in that home, and the kill-recovery
    test, which compares its recovered runs with ``outputs``: taken here, before any later command
    touches the home. Returns ``root``, ``home``, ``env``, ``partition``, ``user`` (a user key of the
    tokens) and ``outputs``.
    """
    import pyarrow.parquet as pq
    from hir.cli.bench.faults import outputs, run_env
    from user_setup import without_environment_on_path

    if Path(sys.prefix).resolve() != (REPO / ".venv").resolve():
        pytest.skip("the README's make targets use the project's .venv; run under .venv/bin/python")
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    root = tmp_path_factory.mktemp("small_pipeline")
    home = root / "home"
    env = without_environment_on_path(run_env(home, CHEAP_BASELINES))
    done = subprocess.run(["make", "run"], cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    partition = sorted(p.name for p in (home / "artifacts" / "bom_tokens").iterdir())[-1]
    bags = pq.read_table(home / "artifacts" / "bom_tokens" / partition / "tokens.parquet",
                         columns=["entity_type", "source_key"]).to_pylist()
    user = next(b["source_key"] for b in bags if b["entity_type"] == "user")
    return {"root": root, "home": home, "env": env, "partition": partition, "user": user, "outputs": outputs(home)}


@pytest.fixture
def settings(data_home):
    from hir.settings import Settings

    return Settings.from_env()


def pytest_configure(config):
    os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
