"""scripts/gpu_check.py: its flex-vs-dense comparison (run here on CPU, dense against dense and
against a deliberately wrong backend) and its clean skip where CUDA is absent."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hir.models.attention import BiasedSelfAttention

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"
FIELDS = {"seq", "batch", "heads", "device", "dense_ms", "flex_ms", "dense_peak_mib", "flex_peak_mib", "max_abs_diff_out",
          "max_abs_diff_grad_x", "max_abs_diff_grad_type_bias", "max_abs_diff_grad_dist_bias"}


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_backend_equal_to_the_reference_differs_by_nothing(gpu_check):
    row = gpu_check.compare(32, torch.device("cpu"), reference="dense", candidate="dense")
    assert set(row) == FIELDS and json.loads(json.dumps(row)) == row
    assert (row["seq"], row["batch"], row["heads"], row["device"]) == (32, 4, 4, "cpu")
    assert all(row[f] == 0.0 for f in FIELDS if f.startswith("max_abs_diff"))
    assert row["dense_ms"] > 0 and row["flex_ms"] > 0


def test_a_wrong_backend_shows_in_the_output_and_every_gradient(gpu_check, monkeypatch):
    dense = BiasedSelfAttention.forward

    def forward(self, x, structure, backend="dense", distance=None):
        if backend != "shifted":
            return dense(self, x, structure, backend, distance)
        return dense(self, 1.5 * x, structure, "dense", distance) + 0.5  # other scores, other output

    monkeypatch.setattr(BiasedSelfAttention, "forward", forward)
    row = gpu_check.compare(32, torch.device("cpu"), reference="dense", candidate="shifted")
    assert row["max_abs_diff_out"] > 0.5
    assert row["max_abs_diff_grad_x"] > 1e-4
    assert row["max_abs_diff_grad_type_bias"] > 1e-6 and row["max_abs_diff_grad_dist_bias"] > 1e-6


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is present: the script runs the real check")
def test_skips_without_cuda():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "gpu_check: CUDA is not available here; skipped\n"
