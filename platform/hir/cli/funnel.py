"""``hir eval funnel``: the deep-funnel conversion ranker rolled over consecutive partitions (issue #21).

The whole pipeline (:func:`hir.cli.runner.run_pipeline`) runs on its own data home
``<data home>/eval/funnel_<folder>_<file>`` for each of ``--partitions`` consecutive days, oldest
first, ending at the newest complete one; each partition's ``ranker_eval`` trains the three arms of
:mod:`hir.evaluation.funnel` on its validation window and tests them on its test window, with
features read from Feast point-in-time. The home is cleared first, so a partition's examples meet
only the features published up to it and the run repeats exactly; ``--reuse`` keeps the home and
re-runs only the rankers (``ranker_eval``, ``evaluation_report``) of partitions that have entity
embeddings.

Windows: ``--window-days`` days each, by default the fewest whole days that hold
``MIN_WINDOW_OUTCOMES`` outcome events at the log's median daily rate (one day on a busy log, more
on a sparse one), so a test window has enough purchases for an interval.

The last line with ``--json`` is one JSON object: ``arms.<arm>`` (means over the partitions, with
intervals), ``diff`` and ``diff_ci`` (hir − base, hir − control), ``slices``, ``partitions`` (each
partition's own figures), ``retrieval`` (Recall@50 of the test window's purchases for hir's
candidates and the baselines, from ``retrieval_eval``), windows, settings and seconds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from datetime import timedelta
from pathlib import Path

PARTITIONS = 3
MIN_WINDOW_OUTCOMES = 500
RETRIEVAL_K = 50
RANKER_ASSETS = ("ranker_eval", "evaluation_report")  # what --reuse re-runs on a partition with embeddings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``hir eval funnel`` (``--path``, ``--json``, ``--seed``, ``--reuse`` are eval's own)."""
    parser.add_argument("--source", default="csv", help="funnel: source kind of --path (default csv)")
    parser.add_argument("--mapping", help="funnel: the csv source's YAML mapping (default HIR_CSV_MAPPING or mapping.yaml beside the data)")
    parser.add_argument("--partitions", type=int, default=PARTITIONS, help=f"funnel: consecutive partitions (default {PARTITIONS})")
    parser.add_argument("--window-days", type=float, default=None,
                        help=f"funnel: validation and test window length (default: the days holding {MIN_WINDOW_OUTCOMES} outcomes)")


def _progress(message: str) -> None:
    print(f"[hir eval funnel {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def home_name(path: str) -> str:
    """``funnel_<folder>_<file stem>``: two logs named ``events.csv.gz`` get two homes."""
    resolved = Path(path).resolve()
    return f"funnel_{resolved.parent.name}_{resolved.name.split('.')[0]}"


def window_days(settings) -> float:
    """The fewest whole days holding ``MIN_WINDOW_OUTCOMES`` outcomes at the median daily rate."""
    from hir.evaluation.funnel import parse_stages
    from hir.graph.warehouse import connect

    outcomes = sorted(parse_stages(settings.funnel_stages)[-1])
    with connect(settings.warehouse_path, read_only=True) as con:
        (median,) = con.execute("SELECT median(n) FROM (SELECT count(*) AS n FROM events WHERE list_contains(?, event_type) "
                                "GROUP BY date_trunc('day', ts))", [outcomes]).fetchone()
    return float(max(1, math.ceil(MIN_WINDOW_OUTCOMES / median))) if median else 1.0


def _pipeline_settings(args, settings):
    """The evaluation home's settings (cleared unless ``--reuse``), exported for the run's processes."""
    home = settings.data_home / "eval" / home_name(args.path)
    if home.exists() and not args.reuse:
        shutil.rmtree(home)
    (home / "dagster").mkdir(parents=True, exist_ok=True)
    mapping = str(Path(args.mapping).resolve()) if args.mapping else settings.csv_mapping
    seed = settings.seed if args.seed is None else args.seed
    return settings.replace(data_home=home, source=args.source, source_path=str(Path(args.path).resolve()),
                            csv_mapping=mapping, seed=seed)


def _export(settings) -> None:
    os.environ.update(settings.as_env())  # processes a run starts (other executors) read their settings from it
    os.environ["DAGSTER_HOME"] = str(settings.data_home / "dagster")


def _partitions(settings, count: int) -> list[str]:
    from datetime import date

    from hir.cli.runner import newest_complete_partition
    from hir.errors import SourceError

    newest = newest_complete_partition(settings)
    if newest is None:
        raise SourceError("no complete daily partition: the events do not cover a cut-off plus its windows")
    last = date.fromisoformat(newest)
    return [(last - timedelta(days=k)).isoformat() for k in reversed(range(count))]


def run_funnel(args, settings) -> dict:
    """Run the pipeline on each partition and summarise the funnel rankers (module docstring)."""
    from hir.cli.runner import run_pipeline
    from hir.errors import SettingsError
    from hir.storage import Artifacts

    if not args.path:
        raise SettingsError("hir eval funnel needs --path")
    if args.partitions < 1:
        raise SettingsError("--partitions must be at least 1")
    started = time.perf_counter()
    pipeline = _pipeline_settings(args, settings)
    _export(pipeline)
    run_pipeline(pipeline, ingest_only=True)
    days = args.window_days or window_days(pipeline)
    pipeline = pipeline.replace(val_days=days, test_days=days)
    _export(pipeline)
    keys = _partitions(pipeline, args.partitions)
    catalogue = Artifacts(pipeline.artifacts_dir)
    for key in keys:
        done = args.reuse and catalogue.embeddings(key).exists()
        _progress(f"partition {key} (windows of {days:g} days) on {pipeline.data_home}{': rankers only' if done else ''}")
        run_pipeline(pipeline, partition=key, only=list(RANKER_ASSETS) if done else None)
    report = summarise_partitions(catalogue, keys, pipeline.seed)
    report.update({"dataset": home_name(args.path).removeprefix("funnel_"), "source": args.source, "path": str(Path(args.path).resolve()),
                   "window_days": days, "funnel_stages": pipeline.funnel_stages, "seed": pipeline.seed,
                   "data_home": str(pipeline.data_home), "threads": pipeline.threads,
                   "encoder": {"train_steps": pipeline.train_steps, "train_dim": pipeline.train_dim},
                   "seconds": round(time.perf_counter() - started, 1)})
    return report


def summarise_partitions(catalogue, keys: list[str], seed: int) -> dict:
    """Means over the partitions ``keys`` of their ``ranker_eval`` funnel scores, each partition's
    own figures, and the retrieval stage's Recall@50."""
    import pandas as pd

    from hir.evaluation.funnel import SCORES_FILE, summarise

    per_partition, scores = [], []
    for key in keys:
        funnel = json.loads(catalogue.results("ranker_eval", key).read_text(encoding="utf-8")).get("funnel", {})
        per_partition.append({"partition": key, **funnel})
        path = catalogue.folder("ranker_eval", key) / SCORES_FILE
        if funnel.get("status") == "ok" and path.exists():
            scores.append(pd.read_parquet(path))
    report = summarise(scores, seed) if scores else {"status": "not applicable", "reason": "no partition had a funnel task"}
    report["partitions"] = per_partition
    report["retrieval"] = _retrieval(catalogue, keys)
    return report


def _retrieval(catalogue, keys: list[str]) -> dict:
    """Recall@50 of every scorer in ``retrieval_eval``: per partition and the mean."""
    metric = f"recall@{RETRIEVAL_K}"
    rows = {}
    for key in keys:
        path = catalogue.results("retrieval_eval", key)
        if path.exists():
            results = json.loads(path.read_text(encoding="utf-8"))["results"]
            rows[key] = {name: row[metric] for name, row in results.items() if metric in row}
    names = sorted({n for r in rows.values() for n in r})
    mean = {n: round(sum(r[n] for r in rows.values() if n in r) / sum(n in r for r in rows.values()), 6) for n in names}
    return {metric: mean, "per_partition": rows}
