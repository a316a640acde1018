"""The process environment every entry point shares: data home, Dagster instance, threads.

``prepare(settings)`` points ``DAGSTER_HOME`` at ``<data home>/dagster`` (an absolute path), writes
the instance settings there and turns telemetry off, so runs of ``hir run`` show in ``hir ui``.
"""

from __future__ import annotations

import os
from pathlib import Path

from hir.settings import Settings
from hir.storage import write_bytes

INSTANCE_YAML = Path(__file__).resolve().parent.parent / "dagster.yaml"


def prepare(settings: Settings) -> Path:
    """Create the data home and Dagster home; export the variables child processes need."""
    home = settings.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    target = home / "dagster.yaml"
    wanted = INSTANCE_YAML.read_bytes()
    if not target.exists() or target.read_bytes() != wanted:
        write_bytes(target, wanted)
    os.environ["DAGSTER_HOME"] = str(home)
    os.environ["DAGSTER_DISABLE_TELEMETRY"] = "1"
    os.environ["HIR_DATA_HOME"] = str(settings.data_home)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    return home
