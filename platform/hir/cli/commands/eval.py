"""Evaluate retrieval on a data set with every baseline of the same run.

``amazon_seq``: the published leave-last-out protocol (train on all but each user's last two
items, validate on the second to last, test on the last, full ranking over all items with the
user's earlier items masked; Recall@5/10, NDCG@5/10), so results sit beside the S3-Rec/TIGER
tables. ``synthetic``, ``taobao_userbehavior``, ``movielens``: the temporal protocol (train before
the cut-off, test on the target events after it; Recall@10/50, NDCG@10, MRR, and a cold-start
slice). The last line with ``--json`` is one JSON object: the data set, hir's figures, every
baseline's figures, and the run's protocol, settings and seeds. The top-level figures are always
those of ``hir``, the user's own embedding: ``headline`` names it and ``headline_rule`` states the
rule (:data:`hir.evaluation.scorers.HEADLINE_RULE`), fixed before the run. ``hir`` holds every hir
scorer's row (``hir_seq`` among them), ``baselines`` every baseline's (SASRec's started controls
``sasrec_text`` and ``sasrec_als`` among them), and ``hir_scorers_beating_every_baseline`` names the
hir scorers above every baseline on Recall@10 and NDCG@10. ``diff`` and ``diff_ci`` hold, for ``hir``
against every baseline (``hir_minus_<baseline>``) and ``hir_seq`` against each SASRec of its family
(``hir_seq_minus_<member>``), the difference of Recall@10 and NDCG@10 and its paired 95 % bootstrap
interval over the test queries (:func:`hir.evaluation.protocols.paired_differences`): whether a
lead or a gap is larger than the queries' own noise. Over several seeds a family member's figure
on a query is its mean over the seeds, so the interval is that of the seed mean (the seeds' own
spread is the rows' ``_std``).

``--seeds N`` repeats the SASRec family (``sasrec``, ``hir_seq``, ``sasrec_text``, ``sasrec_als``;
:func:`hir.evaluation.scorers.sequence_family`) at seeds ``seed, seed + 1, …, seed + N - 1``; the
other scorers run once, at ``seed``. With ``N > 1`` each family row holds, under every figure's
own key, its mean over the seeds, under ``<figure>_std`` its sample standard deviation (``n - 1``;
slices such as ``cold_start`` alike), ``seeds`` (the list) and ``per_seed`` (the rows of each seed,
in that order); ``queries`` is the same at every seed. With one seed (the default,
``HIR_EVAL_SEEDS``) the rows are plain. The top-level ``seeds`` lists the seeds, ``repeated_over_seeds``
the family rows that ran over them.

hir's figures: the whole pipeline (``hir.cli.runner.run_pipeline``: ingest, world knowledge, snapshot,
training, embeddings, tokens, Feast, evaluation assets) runs on its own data home
``<data home>/eval/<dataset>[_<folder>]`` for the newest complete partition, and the partition's
entity embeddings score (:func:`hir.evaluation.scorers.hir_factories`: ``hir``, the user·item cosine over
the encoder's InfoNCE temperature plus the item's log prior; ``hir_recent``, the same queried with
the user's last items; ``hir_no_prior``, the plain dot product; ``hir_engagement``, ``hir``'s top
candidates re-ranked by the encoder's engagement head; ``hir_bom``, Bag-of-Meaning overlap; and,
with ``sasrec`` among the baselines, ``hir_seq``, SASRec whose item table starts from hir's item
embeddings, beside its controls started from the items' text vectors or ALS factors). The
encoder's training budget is the pipeline's (``HIR_TRAIN_STEPS``, ``HIR_TRAIN_BATCH``).
Temporal data sets are then split at that partition's cut-off (tested on its test window), so hir
and every baseline see the same split; ``amazon_seq`` keeps the published split, whose training
part is exactly the snapshot before cut-off 2014-12-31 (the source dates each user's last item
2015-01-01 and the one before 2014-12-31). The rankers' figures (``ranker_eval``) come along.
``--no-hir`` skips the pipeline (``"hir": "not run"``); ``--reuse`` keeps a finished pipeline.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from hir.cli import funnel as funnel_eval
from hir.settings import Settings

HELP = "evaluate retrieval with all baselines on one data set (published or temporal protocol)"

DATASETS = ("amazon_seq", "synthetic", "taobao_userbehavior", "movielens")
BASELINES = ("popularity", "cooccurrence", "als", "lightgcn", "sasrec", "text_world_knowledge")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", choices=(*DATASETS, "funnel"),
                        help="source kind to evaluate, or funnel: the deep-funnel conversion ranker (hir.cli.funnel)")
    parser.add_argument("--path", help="input file or folder (not for synthetic)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    parser.add_argument("--seed", type=int, help="seed of every stochastic baseline (default HIR_SEED)")
    parser.add_argument("--seeds", type=int, default=None,
                        help="repeat SASRec, hir_seq and its controls at this many seeds (seed, seed+1, ...) and "
                             "report each figure's mean and sample std (<figure>_std) (default HIR_EVAL_SEEDS, 1)")
    parser.add_argument("--baselines", default=",".join(BASELINES),
                        help=f"comma-separated subset of {', '.join(BASELINES)}")
    parser.add_argument("--max-epochs", type=int, default=None,
                        help="bound on SASRec and LightGCN epochs (default: their configs)")
    parser.add_argument("--no-hir", action="store_true", help="baselines only: do not run the pipeline")
    parser.add_argument("--reuse", action="store_true",
                        help="reuse the evaluation data home's finished pipeline (its entity embeddings) if present")
    funnel_eval.add_arguments(parser)


def _progress(message: str) -> None:
    print(f"[hir eval {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from hir.errors import SettingsError

    if args.dataset == "funnel":
        report = funnel_eval.run_funnel(args, settings)
        print(json.dumps(report) if args.json else json.dumps(report, indent=2))
        return 0
    seed = settings.seed if args.seed is None else args.seed
    chosen = [b.strip() for b in args.baselines.split(",") if b.strip()]
    unknown = sorted(set(chosen) - set(BASELINES))
    if unknown:
        raise SettingsError(f"--baselines: unknown {', '.join(unknown)}; choose from {', '.join(BASELINES)}")
    if args.dataset != "synthetic" and not args.path:
        raise SettingsError(f"hir eval {args.dataset} needs --path")
    seeds = settings.eval_seeds if args.seeds is None else args.seeds
    if seeds < 1:
        raise SettingsError(f"--seeds: {seeds}; give at least 1")
    report = evaluate_dataset(args.dataset, args.path, settings, seed, chosen, args.max_epochs,
                              with_hir=not args.no_hir, reuse=args.reuse, seeds=seeds)
    if args.json:
        print(json.dumps(report))
    else:
        print(json.dumps(report, indent=2))
    return 0


def evaluate_dataset(dataset: str, path: str | None, settings, seed: int, baselines: list[str],
                     max_epochs: int | None = None, with_hir: bool = True, reuse: bool = False,
                     seeds: int = 1) -> dict:
    """Build the split of ``dataset``, fit and evaluate hir and ``baselines`` on it, return the report.

    Args:
        dataset: source kind; path: its file or folder; settings: platform settings (the data home
            holds the evaluation data homes); seed: every stochastic baseline's seed;
        baselines: names; max_epochs: bound on the neural baselines;
        with_hir: run the pipeline and evaluate hir; reuse: keep a finished pipeline's artefacts;
        seeds: how many seeds the SASRec family runs at (``seed`` upwards).
    """
    import torch

    from hir.evaluation import protocols, scorers
    from hir.storage import Artifacts

    torch.set_num_threads(max(1, settings.threads))
    started = time.perf_counter()
    pipeline = _pipeline(dataset, path, settings, reuse) if with_hir else None
    split, name, ks, key_maps = _split(dataset, path, settings, pipeline)
    _progress(f"{name}: {json.dumps(split.info)}")
    text = scorers.split_text_vectors(split, settings)
    once = [b for b in baselines if b != "sasrec"]
    factories, skipped = scorers.baseline_factories(split, settings, seed, once, max_epochs, text)
    per_query = {}  # every scorer's figures on each test query: the paired intervals below
    results = protocols.run_scorers(split, factories, ks, _progress, per_query)
    report = {"dataset": name}
    hir, hir_items = {}, None
    if pipeline is not None:
        artifacts = Artifacts(pipeline["settings"].artifacts_dir)
        hir_scorers = scorers.hir_factories(split, artifacts, pipeline["partition"], pipeline["settings"], *key_maps)
        hir = protocols.run_scorers(split, hir_scorers, ks, _progress, per_query)
        hir_items = scorers.hir_item_table(split, artifacts, pipeline["partition"], *key_maps[1:])  # the item key map
    run_seeds = scorers.seeds_of(seed, seeds)
    if "sasrec" in baselines:
        hir_seq, family, family_skipped = scorers.run_sequence_family(split, settings, run_seeds, max_epochs, ks,
                                                                      hir_items, text, _progress, per_query)
        hir, results, skipped = hir | hir_seq, results | family, skipped | family_skipped
    headline = scorers.HEADLINE_SCORER if hir else None
    for k in ks:
        report[f"recall@{k}"] = hir[headline][f"recall@{k}"] if hir else None
        report[f"ndcg@{k}"] = hir[headline][f"ndcg@{k}"] if hir else None
    report["headline"] = headline
    report["headline_rule"] = scorers.HEADLINE_RULE
    report["hir"] = hir if hir else "not run"
    report["baselines"] = results
    report["best_baseline"] = max(results, key=lambda b: results[b][f"ndcg@{ks[-1]}"]) if results else None
    report["hir_scorers_beating_every_baseline"] = protocols.beating_every_baseline(hir, results) if hir else []
    report.update(protocols.paired_differences(per_query, scorers.compared_pairs(hir, results), seed=seed))
    report["skipped"] = skipped
    if pipeline is not None:
        report["rankers"] = _rankers(pipeline)
        report["pipeline"] = {"data_home": str(pipeline["settings"].data_home), "partition": pipeline["partition"],
                              "train_steps": pipeline["settings"].train_steps, "train_dim": pipeline["settings"].train_dim,
                              "train_batch": pipeline["settings"].train_batch, "bom_codes": pipeline["settings"].bom_codes,
                              "report": str(pipeline["settings"].data_home / "reports" / f"evaluation_{pipeline['partition']}.md")}
    report["protocol"] = split.info
    report["seed"] = seed
    report["seeds"] = run_seeds
    report["repeated_over_seeds"] = [n for n in scorers.SEQUENCE_FAMILY if n in results or n in hir]
    report["settings"] = scorers.run_settings(settings, max_epochs)
    report["seconds"] = round(time.perf_counter() - started, 1)
    return report


def _pipeline(dataset: str, path: str | None, settings, reuse: bool) -> dict:
    """Run (or, with ``reuse``, find) the pipeline of ``dataset`` on its own data home.

    Returns ``{"settings": the data home's settings, "partition": the evaluated day}``.
    """
    import os

    from hir.cli.runner import newest_complete_partition, run_pipeline
    from hir.storage import Artifacts

    name = dataset if path is None else f"{dataset}_{Path(path).resolve().name}"
    home = settings.data_home / "eval" / name
    home.mkdir(parents=True, exist_ok=True)
    source_path = str(Path(path).resolve()) if path else ""
    env = {"HIR_DATA_HOME": str(home), "HIR_SOURCE": dataset, "HIR_SOURCE_PATH": source_path,
           "DAGSTER_HOME": str(home / "dagster")}
    os.environ.update(env)  # processes a run starts (other executors) read their settings from it
    pipeline_settings = settings.replace(data_home=home, source=dataset, source_path=source_path)
    partition = newest_complete_partition(pipeline_settings) if pipeline_settings.warehouse_path.exists() else None
    done = partition is not None and Artifacts(pipeline_settings.artifacts_dir).embeddings(partition).exists()
    if not (reuse and done):
        _progress(f"running the pipeline on {home}")
        run_pipeline(pipeline_settings)
        partition = newest_complete_partition(pipeline_settings)
    return {"settings": pipeline_settings, "partition": partition}


def _split(dataset: str, path: str | None, settings, pipeline: dict | None):
    """The split, report name, cut-offs K and hir's key maps (split key → entity source key)."""
    from hir.evaluation import protocols

    if dataset == "amazon_seq":
        split = protocols.amazon_split(Path(path))
        return split, f"amazon_{split.info['dataset']}", (5, 10), _amazon_key_maps(Path(path))
    if pipeline is not None:
        from hir.evaluation.data import partition_split
        from hir.graph.warehouse import connect
        from hir.partitions import cutoff_of

        with connect(pipeline["settings"].warehouse_path, read_only=True) as con:
            split = partition_split(con, cutoff_of(pipeline["partition"]), pipeline["settings"])
        return split, dataset, (10, 50), ()
    from hir.graph.sources import read_source

    batch = read_source(dataset, path, settings)
    split = protocols.temporal_split(batch.events, batch.entities, batch.content,
                                     protocols.TEMPORAL_TARGETS[dataset], settings.test_days)
    return split, dataset, (10, 50), ()


def _amazon_key_maps(path: Path) -> tuple:
    """Integer user/item ids of the sequence file → reviewer ids / ASINs (the entities' keys)."""
    import numpy as np

    folder = path if path.is_dir() else path.parent
    maps = sorted(folder.glob("*datamaps.json"))
    if not maps:
        return ()
    data = json.loads(maps[0].read_text(encoding="utf-8"))
    users, items = data.get("id2user", {}), data.get("id2item", {})
    return (lambda keys: np.array([users.get(str(k), str(k)) for k in keys]),
            lambda keys: np.array([items.get(str(k), str(k)) for k in keys]))


def _rankers(pipeline: dict) -> dict:
    """The pipeline's ``ranker_eval`` figures (AUC etc. with and without hir features)."""
    from hir.storage import Artifacts

    results = Artifacts(pipeline["settings"].artifacts_dir).results("ranker_eval", pipeline["partition"])
    if not results.exists():
        return {"status": "not run"}
    return json.loads(results.read_text(encoding="utf-8"))["results"]
