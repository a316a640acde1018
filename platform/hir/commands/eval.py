"""Evaluate retrieval on a data set with every baseline of the same run.

``amazon_seq``: the published leave-last-out protocol (train on all but each user's last two
items, validate on the second to last, test on the last, full ranking over all items with the
user's earlier items masked; Recall@5/10, NDCG@5/10), so results sit beside the S3-Rec/TIGER
tables. ``synthetic``, ``taobao_userbehavior``, ``movielens``: the temporal protocol (train before
the cut-off, test on the target events after it; Recall@10/50, NDCG@10, MRR, and a cold-start
slice). The last line with ``--json`` is one JSON object: the data set, hir's figures (null with
``"hir": "not trained"`` until hir's embeddings are plugged in as a scorer), every baseline's
figures, and the run's protocol, settings and seed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HELP = "evaluate retrieval with all baselines on one data set (published or temporal protocol)"

DATASETS = ("amazon_seq", "synthetic", "taobao_userbehavior", "movielens")
BASELINES = ("popularity", "cooccurrence", "als", "lightgcn", "sasrec", "text_world_knowledge")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", choices=DATASETS, help="source kind to evaluate")
    parser.add_argument("--path", help="input file or folder (not for synthetic)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    parser.add_argument("--seed", type=int, help="seed of every stochastic baseline (default HIR_SEED)")
    parser.add_argument("--baselines", default=",".join(BASELINES),
                        help=f"comma-separated subset of {', '.join(BASELINES)}")
    parser.add_argument("--max-epochs", type=int, default=None,
                        help="bound on SASRec and LightGCN epochs (default: their configs)")


def _progress(message: str) -> None:
    print(f"[hir eval {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from hir.settings import Settings, SettingsError

    settings = Settings.from_env()
    seed = settings.seed if args.seed is None else args.seed
    chosen = [b.strip() for b in args.baselines.split(",") if b.strip()]
    unknown = sorted(set(chosen) - set(BASELINES))
    if unknown:
        raise SettingsError(f"--baselines: unknown {', '.join(unknown)}; choose from {', '.join(BASELINES)}")
    if args.dataset != "synthetic" and not args.path:
        raise SettingsError(f"hir eval {args.dataset} needs --path")
    report = evaluate_dataset(args.dataset, args.path, settings, seed, chosen, args.max_epochs)
    if args.json:
        print(json.dumps(report))
    else:
        print(json.dumps(report, indent=2))
    return 0


def evaluate_dataset(dataset: str, path: str | None, settings, seed: int, baselines: list[str],
                     max_epochs: int | None = None) -> dict:
    """Build the split of ``dataset``, fit and evaluate ``baselines`` on it, return the report."""
    import torch

    from hir import evaluation

    torch.set_num_threads(max(1, settings.threads))
    started = time.perf_counter()
    if dataset == "amazon_seq":
        split = evaluation.amazon_split(Path(path))
        name, ks = f"amazon_{split.info['dataset']}", (5, 10)
    else:
        from hir.sources import read_source

        batch = read_source(dataset, path, settings)
        split = evaluation.temporal_split(batch.events, batch.entities, batch.content,
                                          evaluation.TEMPORAL_TARGETS[dataset], settings.test_days)
        name, ks = dataset, (10, 50)
    _progress(f"{name}: {json.dumps(split.info)}")
    factories, skipped = evaluation.baseline_factories(split, settings, seed, baselines, max_epochs)
    results = evaluation.run_scorers(split, factories, ks, _progress)
    report = {"dataset": name}
    for k in ks:
        report[f"recall@{k}"] = None
        report[f"ndcg@{k}"] = None
    report["hir"] = "not trained"
    report["baselines"] = results
    report["best_baseline"] = max(results, key=lambda b: results[b][f"ndcg@{ks[-1]}"]) if results else None
    report["skipped"] = skipped
    report["protocol"] = split.info
    report["seed"] = seed
    report["settings"] = evaluation.run_settings(settings, max_epochs)
    report["seconds"] = round(time.perf_counter() - started, 1)
    return report
