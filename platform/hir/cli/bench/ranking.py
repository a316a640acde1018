"""Full-ranking evaluation speed: `hir bench ranking --json`.

Ranks ``--queries`` queries against ``--items`` candidates, ``--batch`` queries at a time, with
:func:`hir.models.metrics.ranking_metrics` (what every scorer of ``hir eval`` is measured with) and
with the textbook torch path in the same run: sort every row (``torch.sort``), then a binary search
of the targets. Scores are rounded so that ties occur; a quarter of the queries have several
targets (a user who buys several items in a test window), up to ``--max-targets``, the rest one.
``speedup`` is the torch path's time over hir's; ``max_abs_diff`` compares their Recall@10, NDCG@10
and MRR, made from each path's counts by the same formulas (the counts are exact on both: 0).
"""

from __future__ import annotations

import argparse
import time

import torch

from hir.settings import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--queries", type=int, default=4096, help="queries ranked")
    parser.add_argument("--items", type=int, default=100_000, help="candidates per query (full ranking)")
    parser.add_argument("--batch", type=int, default=1024, help="queries per scored batch, as hir eval scores them")
    parser.add_argument("--max-targets", type=int, default=40, help="targets of the widest query")
    parser.add_argument("--seed", type=int, default=0)


def sorted_counts(scores: torch.Tensor, target_scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The baseline: every row sorted by torch, then ``(greater, ties)`` of each target by binary search."""
    ascending = torch.sort(scores, dim=1).values
    n_items = scores.shape[1]
    greater = n_items - torch.searchsorted(ascending, target_scores.contiguous(), right=True)
    at_least = n_items - torch.searchsorted(ascending, target_scores.contiguous(), right=False)
    return greater.double(), (at_least - 1).double() - greater.double()


def run(args: argparse.Namespace, settings: Settings) -> dict:
    from hir.models.metrics import metrics_from_counts, ranking_metrics

    generator = torch.Generator().manual_seed(args.seed)
    widths = torch.where(torch.rand(args.queries, generator=generator) < 0.25,
                         torch.randint(2, args.max_targets + 1, (args.queries,), generator=generator), 1)
    columns = torch.arange(int(widths.max()))
    targets = torch.where(columns < widths[:, None], torch.randint(0, args.items, (args.queries, len(columns)), generator=generator), -1)
    seconds = {"hir": 0.0, "torch_sort": 0.0}
    largest = 0.0
    for start in range(0, args.queries, args.batch):
        rows = slice(start, start + args.batch)
        scores = torch.randn(len(targets[rows]), args.items, generator=generator).round(decimals=2)
        began = time.perf_counter()
        ours = ranking_metrics(scores, targets[rows], ks=(10,))
        seconds["hir"] += time.perf_counter() - began
        began = time.perf_counter()
        valid = targets[rows] >= 0
        theirs = metrics_from_counts(*sorted_counts(scores, scores.gather(1, targets[rows].clamp(min=0))), valid, valid, (10,))
        seconds["torch_sort"] += time.perf_counter() - began
        largest = max(largest, max(float((ours[m] - theirs[m]).abs().max()) for m in ours))
    return {
        "queries": args.queries, "items": args.items, "batch": args.batch,
        "multi_target_share": round(float((widths > 1).float().mean()), 3),
        "hir_s": round(seconds["hir"], 3), "torch_sort_s": round(seconds["torch_sort"], 3),
        "speedup": round(seconds["torch_sort"] / seconds["hir"], 2), "max_abs_diff": largest,
        "threads": torch.get_num_threads(),
    }
