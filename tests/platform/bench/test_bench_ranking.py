"""`hir bench ranking`: hir's rank counting against the torch sort path, on the same scores."""

from __future__ import annotations

import argparse

import torch
from hir.cli.bench import ranking as bench
from hir.models.metrics import metrics_from_counts, ranking_metrics
from hir.settings import Settings


def _args(**overrides) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args([f"--{k}={v}" for k, v in {"queries": 96, "items": 500, "batch": 32, **overrides}.items()])


def test_the_two_paths_give_the_same_figures():
    result = bench.run(_args(), Settings())
    assert result["max_abs_diff"] < 1e-9
    assert result["queries"] == 96 and 0.1 < result["multi_target_share"] < 0.4
    assert result["hir_s"] > 0 and result["torch_sort_s"] > 0 and result["speedup"] > 0


def test_the_baseline_counts_as_the_metrics_do():
    gen = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 5, (3, 40), generator=gen).float()
    targets = torch.tensor([[1, 2, -1], [3, -1, -1], [0, 5, 9]])
    valid = targets >= 0
    theirs = metrics_from_counts(*bench.sorted_counts(scores, scores.gather(1, targets.clamp(min=0))), valid, valid, (10,))
    ours = ranking_metrics(scores, targets, ks=(10,))
    assert all(torch.equal(theirs[m], ours[m]) for m in ours)
