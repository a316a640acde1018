"""Shared fixtures: every test gets its own data home; real public data is read from ../shared/data."""

from __future__ import annotations

import os
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


@pytest.fixture
def settings(data_home):
    from hir.settings import Settings

    return Settings.from_env()


def pytest_configure(config):
    os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
