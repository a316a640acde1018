"""The repository layout keeps Python's own ``platform`` module importable (DESIGN §1)."""

import subprocess
import sys

from conftest import REPO


def test_stdlib_platform_importable_from_repo_root():
    code = "import platform, sys; print(platform.python_version()); import torch, dagster"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ".".join(map(str, sys.version_info[:3]))
    assert not (REPO / "platform" / "__init__.py").exists()


def test_definitions_load():
    from hir.definitions import defs

    assert defs.resolve_job_def("hir_job") is not None
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"entities", "events", "relations", "content", "rejected_rows"} <= keys


def test_the_code_location_loads_without_torch():
    """Heavy libraries load inside asset bodies, so `dagster dev` and every step start fast."""
    code = "import sys, hir.definitions; print(sorted(m for m in ('torch', 'feast', 'sentence_transformers', 'open_clip') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
