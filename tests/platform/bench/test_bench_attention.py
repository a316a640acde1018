"""`hir bench attention`: both backends in subprocesses, compared through safetensors files."""

from __future__ import annotations

import argparse

import pytest
import torch
from hir.cli.bench import attention as bench
from hir.settings import Settings


def test_random_structure_is_a_padded_view_tree():
    s = bench.random_structure(3, 40, torch.Generator().manual_seed(0))
    assert not s.pad[0].any() and s.pad[1, 35:].all() and s.pad[2, 30:].all() and not s.pad[:, :30].any()
    assert s.depth[:, 0].eq(0).all() and s.depth.max() == bench.MAX_DEPTH
    real = ~s.pad
    own = s.ancestors.gather(2, s.depth.unsqueeze(-1)).squeeze(-1)
    assert torch.equal(own[real], torch.arange(40).expand(3, 40)[real])  # each token is its own deepest ancestor
    assert s.ancestors[:, :, 0][real].eq(0).all()  # the anchor is everyone's root


@pytest.mark.slow
def test_bench_reports_both_backends_and_agreement():
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    result = bench.run(parser.parse_args(["--seq", "64", "--batch", "2", "--heads", "2", "--head-dim", "8"]), Settings.from_env())
    assert set(result) == {"seq", "batch", "heads", "dense_peak_mb", "flex_peak_mb", "memory_ratio", "dense_ms", "flex_ms", "max_abs_diff"}
    assert (result["seq"], result["batch"], result["heads"]) == (64, 2, 2)
    assert result["max_abs_diff"] <= 1e-4
    assert result["dense_ms"] > 0 and result["flex_ms"] > 0
