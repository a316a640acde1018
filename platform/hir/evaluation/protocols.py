"""Evaluation protocols: the published leave-last-out protocol and the temporal cut-off protocol.

Both turn input data into a :class:`Split` — training interactions, validation queries (for early
stopping) and test queries — on which every :class:`~hir.models.baselines.base.Scorer` is fitted
and evaluated in the same run, by :func:`run_scorers` (the scorers are listed in
:mod:`hir.evaluation.scorers`), or by :func:`run_over_seeds` for those repeated over seeds.

* :func:`leave_last_out` (``amazon_seq``, S3-Rec/TIGER tables): train on all but each user's last
  two items, validate on the second to last (history: the training part), test on the last
  (history: all earlier items); every item is a candidate except the user's earlier items.
* :func:`temporal_split` (dated sources): cut-off ``T``; scorers train on user→item events before
  ``T`` (less each user's last one, which is the validation target) and are tested on the distinct
  items of target-type events in ``[T, end]`` (e.g. ``buy``), ranked against every item of the
  target's entity type; plus a cold-start slice: targets with no interaction at all before ``T``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import pandas as pd

from hir.errors import SourceError
from hir.graph.sources.amazon_seq import read_item_texts, user_sequences
from hir.models.baselines.base import Interactions, Queries, Scorer, evaluate, evaluate_per_query
from hir.models.metrics import pad_targets, paired_bootstrap, query_means

DAY = 86_400.0


@dataclass
class Split:
    """One evaluation split over dense user and item indices.

    Attributes:
        train: what scorers are fitted on.
        validation: queries for early stopping (history = ``train``).
        test: the reported queries.
        slices: further named subsets of the test queries (e.g. ``cold_start``).
        window_validation: on a temporal split with a validation window between the cut-off and the
            test window, the target events of that window as queries (history: everything before
            the cut-off, as the test's), seen by nothing fitted at the cut-off; ``None`` without one.
        item_keys: source key of each item index; user_keys likewise.
        item_text: text of each item index (``None`` where it has none), or ``None`` when the
            source has no item text at all.
        info: protocol facts for the report (cut-off, windows, counts).
    """

    train: Interactions
    validation: Queries
    test: Queries
    item_keys: np.ndarray
    user_keys: np.ndarray
    item_text: list[str | None] | None = None
    slices: dict[str, Queries] = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    window_validation: Queries | None = None


def _csr(rows: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    indices = np.concatenate(rows + [np.empty(0, np.int64)]).astype(np.int64)
    return np.concatenate([[0], np.cumsum(lengths)]), indices


def leave_last_out(user_keys: list[str], sequences: list[list[str]]) -> Split:
    """The published protocol on chronological sequences (see the module docstring).

    Users with fewer than three items contribute to training only what precedes their
    validation/test items; a user needs two items to be tested and three to be validated.
    """
    item_keys = np.array(sorted({i for s in sequences for i in s}, key=lambda k: (len(k), k)))
    index = {k: n for n, k in enumerate(item_keys)}
    seqs = [np.array([index[i] for i in s], dtype=np.int64) for s in sequences]
    n_users, n_items = len(seqs), len(item_keys)

    def interactions(cut: int) -> Interactions:
        parts = [s[: max(len(s) - cut, 0)] for s in seqs]
        users = np.repeat(np.arange(n_users), [len(p) for p in parts])
        times = np.concatenate([np.arange(len(p)) for p in parts] + [np.empty(0)])
        return Interactions(users, np.concatenate(parts + [np.empty(0, np.int64)]), times, n_users, n_items)

    train, test_history = interactions(2), interactions(1)

    def queries(back: int, history: Interactions) -> Queries:
        users = np.array([u for u, s in enumerate(seqs) if len(s) >= back + 2], dtype=np.int64)
        targets = np.array([seqs[u][-1 - back] for u in users], dtype=np.int64)
        indptr, indices = _csr([seqs[u][: len(seqs[u]) - 1 - back] for u in users])
        return Queries(users, pad_targets(targets), history, indptr, indices)

    info = {"protocol": "leave_last_out", "users": n_users, "items": n_items,
            "interactions": int(sum(len(s) for s in seqs)), "masking": "user's earlier items"}
    return Split(train, queries(1, train), queries(0, test_history), item_keys, np.array(user_keys), info=info)


def read_amazon_item_text(folder: Path, item_keys: np.ndarray) -> list[str | None] | None:
    """Item text from ``*_datamaps.json`` (``item2id``: ASIN → item id) and ``*_item_textual_ids.txt``
    (:func:`~hir.graph.sources.amazon_seq.read_item_texts`); ``None`` if either file is absent."""
    maps = sorted(folder.glob("*datamaps.json"))
    texts = sorted(folder.glob("*textual_ids.txt"))
    if not maps or not texts:
        return None
    asin_of = {str(v): k for k, v in json.loads(maps[0].read_text(encoding="utf-8"))["item2id"].items()}
    text_of = read_item_texts(texts[0])
    asins = [asin_of.get(str(k)) for k in item_keys]
    return [None if asin is None else text_of.get(asin) or None for asin in asins]


def amazon_split(path: Path) -> Split:
    """Leave-last-out split of an ``amazon_seq`` folder (``<Name>.txt`` sequences) or sequence file."""
    path = Path(path)
    if path.is_dir():
        candidates = [p for p in sorted(path.glob("*.txt")) if not p.name.endswith("textual_ids.txt")]
        if not candidates:
            raise SourceError(f"{path}: no sequence file (<Name>.txt, one user a line)")
        seq_file, folder = candidates[0], path
    else:
        seq_file, folder = path, path.parent
    users, sequences = user_sequences(seq_file)
    split = leave_last_out(users, sequences)
    split.item_text = read_amazon_item_text(folder, split.item_keys)
    split.info["dataset"] = seq_file.stem.lower()
    return split


@dataclass(frozen=True)
class TemporalTarget:
    """What counts as a future interaction to predict.

    Attributes:
        event_types: target event types (e.g. ``{"buy", "purchase"}``).
        min_value: keep only target events with ``value >= min_value`` (ratings), or ``None``.
        mask_seen: remove items the user interacted with before ``T`` from its candidates.
        test_share: the cut-off is the last midnight at or before this quantile of target times
            (capped so the test window holds at least the last ``test_days``).
    """

    event_types: frozenset[str]
    min_value: float | None = None
    mask_seen: bool = False
    test_share: float = 0.1


TEMPORAL_TARGETS = {
    "taobao_userbehavior": TemporalTarget(frozenset({"buy", "purchase"})),
    "movielens": TemporalTarget(frozenset({"rating"}), min_value=4.0, mask_seen=True),
    "synthetic": TemporalTarget(frozenset({"purchase"})),
}


def _unix_seconds(ts: pd.Series) -> np.ndarray:
    """Unix seconds of a timestamp column, whatever its resolution (s, ms, us, ns)."""
    return (pd.to_datetime(ts, utc=True) - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy()


def choose_cutoff(target_times: np.ndarray, end: float, target: TemporalTarget, test_days: float) -> float:
    """Midnight (UTC) at or before the ``1 - test_share`` quantile of target times, and no later
    than ``end - test_days`` rounded down to midnight."""
    quantile = float(np.quantile(target_times, 1.0 - target.test_share))
    latest = end - test_days * DAY
    return float(np.floor(min(quantile, latest) / DAY) * DAY)


def temporal_split(events: pd.DataFrame, entities: pd.DataFrame, content: pd.DataFrame,
                   target: TemporalTarget, test_days: float = 1.0, cutoff: float | None = None) -> Split:
    """The temporal protocol on canonical source frames (see the module docstring).

    Args:
        events: ``src_type, src_key, dst_type, dst_key, event_type, ts, value`` (SourceBatch.events).
        entities: ``entity_type, source_key, ...`` — every entity of the target type is a candidate.
        content: ``entity_type, source_key, text, ...`` for the text-only scorer.
        target: what to predict; test_days: minimum test window; cutoff: ``T`` in unix seconds
            (default: :func:`choose_cutoff`).
    """
    ev = events[events["src_type"] == "user"].copy()
    ev["t"] = _unix_seconds(ev["ts"])
    is_target = ev["event_type"].isin(target.event_types)
    if target.min_value is not None:
        is_target &= ev["value"].astype(float) >= target.min_value
    if not is_target.any():
        raise SourceError(f"no {'/'.join(sorted(target.event_types))} events to predict")
    item_type = ev.loc[is_target, "dst_type"].mode().iloc[0]
    ev = ev[ev["dst_type"] == item_type]
    is_target = is_target[ev.index]
    end = float(ev["t"].max())
    if cutoff is None:
        cutoff = choose_cutoff(ev.loc[is_target, "t"].to_numpy(), end, target, test_days)
    item_keys = np.array(sorted(set(entities.loc[entities["entity_type"] == item_type, "source_key"].astype(str)) | set(ev["dst_key"].astype(str))))
    user_keys = np.array(sorted(set(ev["src_key"].astype(str))))
    item_index = pd.Index(item_keys).get_indexer(ev["dst_key"].astype(str))
    user_index = pd.Index(user_keys).get_indexer(ev["src_key"].astype(str))
    before = ev["t"].to_numpy() < cutoff
    n_users, n_items = len(user_keys), len(item_keys)
    history = Interactions(user_index[before], item_index[before], ev["t"].to_numpy()[before], n_users, n_items)
    train, validation = _hold_out_last(history)
    in_test = (~before) & is_target.to_numpy()
    test_pairs = pd.DataFrame({"u": user_index[in_test], "i": item_index[in_test]}).drop_duplicates()
    test = _window_queries(test_pairs, history, target.mask_seen)
    seen_items = np.zeros(n_items, dtype=bool)
    seen_items[history.items] = True
    cold = _window_queries(test_pairs[~seen_items[test_pairs["i"].to_numpy()]], history, target.mask_seen)
    text = content[content["entity_type"] == item_type].drop_duplicates("source_key").set_index("source_key")["text"]
    item_text = [text.get(k) if isinstance(text.get(k), str) else None for k in item_keys] if len(text) else None
    info = {"protocol": "temporal", "item_type": item_type, "target_events": sorted(target.event_types),
            "target_min_value": target.min_value, "cutoff": pd.Timestamp(cutoff, unit="s", tz="UTC").isoformat(),
            "test_window_end": pd.Timestamp(end, unit="s", tz="UTC").isoformat(), "users": n_users, "items": n_items,
            "train_interactions": len(history), "test_queries": len(test.users), "cold_start_queries": len(cold.users),
            "masking": "items seen before the cut-off" if target.mask_seen else "none"}
    return Split(train, validation, test, item_keys, user_keys, item_text, {"cold_start": cold}, info)


def window_queries(split: Split, events: pd.DataFrame, target: TemporalTarget) -> Queries:
    """The target events of ``events`` (a window after ``split``'s cut-off) as queries over ``split``'s
    users and items (pairs with a user or item it does not know are left out), with the history of
    its test queries.

    Args:
        split: a temporal split; events: ``src_type, src_key, dst_type, dst_key, event_type, value``;
        target: what counts as a target event.
    """
    ev = events[(events["src_type"] == "user") & (events["dst_type"] == split.info["item_type"])
                & events["event_type"].isin(target.event_types)]
    if target.min_value is not None:
        ev = ev[ev["value"].astype(float) >= target.min_value]
    users = pd.Index(split.user_keys).get_indexer(ev["src_key"].astype(str))
    items = pd.Index(split.item_keys).get_indexer(ev["dst_key"].astype(str))
    known = (users >= 0) & (items >= 0)
    pairs = pd.DataFrame({"u": users[known], "i": items[known]}).drop_duplicates()
    return _window_queries(pairs, split.test.history, target.mask_seen)


def _hold_out_last(history: Interactions) -> tuple[Interactions, Queries]:
    """Training = history less each user's last event; validation = that event (users with >= 2 events)."""
    order = np.lexsort((np.arange(len(history)), history.times, history.users))
    users_sorted = history.users[order]
    is_last = np.ones(len(order), dtype=bool)
    is_last[:-1] = users_sorted[:-1] != users_sorted[1:]
    counts = np.bincount(history.users, minlength=history.n_users)
    held = order[is_last & (counts[users_sorted] >= 2)]
    keep = np.ones(len(history), dtype=bool)
    keep[held] = False
    train = Interactions(history.users[keep], history.items[keep], history.times[keep], history.n_users, history.n_items)
    val_users, val_items = history.users[held], history.items[held]
    indptr, rows = train.sequences()
    indptr_ex, indices_ex = _csr([rows[indptr[u] : indptr[u + 1]] for u in val_users])
    return train, Queries(val_users, pad_targets(val_items), train, indptr_ex, indices_ex)


def _window_queries(pairs: pd.DataFrame, history: Interactions, mask_seen: bool) -> Queries:
    """One query per user in ``pairs`` (columns ``u``, ``i``) with its distinct target items."""
    grouped = pairs.groupby("u")["i"].apply(lambda s: np.sort(s.to_numpy()))
    users = grouped.index.to_numpy(dtype=np.int64)
    targets = pad_targets([list(v) for v in grouped.to_numpy()]) if len(users) else pad_targets(np.empty(0, np.int64))
    if not mask_seen:
        return Queries(users, targets, history)
    seen = history.matrix(binary=True)
    indptr, indices = _csr([seen.indices[seen.indptr[u] : seen.indptr[u + 1]].astype(np.int64) for u in users])
    return Queries(users, targets, history, indptr, indices)


def run_scorers(split: Split, factories: dict[str, Callable[[], Scorer]], ks: Iterable[int],
                progress: Callable[[str], None] = lambda _: None, per_query: dict | None = None) -> dict[str, dict]:
    """Fit each scorer on ``split.train`` (watching ``split.validation``) and evaluate it on the
    test queries and every slice. Returns ``{name: {metric: value, ..., "fit_seconds": s,
    "epochs": n (neural baselines), "<slice>": {metric: value}}}``; with ``per_query`` (a dict) it
    also gets ``{name: {metric: [Q] array}}`` of the test queries, for :func:`paired_differences`."""
    ks = tuple(ks)
    results = {}
    for name, make in factories.items():
        started = time.perf_counter()
        progress(f"fitting {name}")
        scorer = make().fit(split.train, split.validation)
        fitted = time.perf_counter() - started
        figures = evaluate_per_query(scorer, split.test, ks)
        if per_query is not None:
            per_query[name] = figures
        row = {k: round(v, 6) if isinstance(v, float) else v for k, v in query_means(figures).items()}
        for slice_name, queries in split.slices.items():
            if len(queries.users):
                sub = evaluate(scorer, queries, ks)
                row[slice_name] = {k: round(v, 6) if isinstance(v, float) else v for k, v in sub.items()}
        row["fit_seconds"] = round(fitted, 1)
        row.update(getattr(scorer, "fit_report", {}))  # what fitting chose (a validated temperature)
        if hasattr(scorer, "epochs_run"):
            row["epochs"] = scorer.epochs_run
        results[name] = row
        progress(f"{name}: " + ", ".join(f"{k}={v}" for k, v in row.items() if not isinstance(v, dict)))
    return results


def run_over_seeds(split: Split, factories_at: Callable[[int], dict[str, Callable[[], Scorer]]], seeds: list[int],
                   ks: Iterable[int], progress: Callable[[str], None] = lambda _: None, per_query: dict | None = None) -> dict[str, dict]:
    """:func:`run_scorers` on ``factories_at(seed)`` for each of ``seeds``: with one seed its rows as
    they are, with more one row per scorer by :func:`mean_over_seeds`; ``per_query`` gets each
    query's figures averaged over the seeds."""
    queries = [{} for _ in seeds]
    runs = [run_scorers(split, factories_at(seed), ks, lambda m, seed=seed: progress(f"seed {seed}: {m}"), at)
            for seed, at in zip(seeds, queries)]
    if per_query is not None:
        per_query.update({name: {m: np.mean([at[name][m] for at in queries], axis=0) for m in figures}
                          for name, figures in queries[0].items()})
    if len(runs) == 1:
        return runs[0]
    return {name: mean_over_seeds([run[name] for run in runs], seeds) for name in runs[0]}


def mean_over_seeds(rows: list[dict], seeds: list[int]) -> dict:
    """One scorer's rows of :func:`run_scorers` at several seeds as one: each figure's mean under its
    own key and its sample standard deviation (``n - 1``) under ``<figure>_std`` (slices alike),
    ``queries`` as it is, the ``seeds`` and the ``per_seed`` rows."""
    return _mean_and_std(rows) | {"seeds": list(seeds), "per_seed": rows}


def _mean_and_std(rows: list[dict]) -> dict:
    """Rows of the same keys as one: ``queries`` kept, nested slices recursed, every other figure's
    mean and ``<figure>_std``."""
    out = {}
    for key, value in rows[0].items():
        if isinstance(value, dict):
            out[key] = _mean_and_std([row[key] for row in rows])
        elif key == "queries":
            out[key] = value
        else:
            figures = np.array([row[key] for row in rows], dtype=float)
            out[key], out[f"{key}_std"] = round(float(figures.mean()), 6), round(float(figures.std(ddof=1)), 6)
    return out


COMPARED_METRICS = ("recall@10", "ndcg@10")  # the figures of the paired intervals (``diff``, ``diff_ci``)


def per_query_frame(per_query: dict[str, dict[str, np.ndarray]], metrics: Iterable[str] = COMPARED_METRICS) -> pd.DataFrame:
    """:func:`run_scorers`' ``per_query`` as a long table (``scorer``, ``query``, one column per
    metric), the form an evaluation asset stores it in for a later paired comparison."""
    metrics = list(metrics)
    frames = [pd.DataFrame({"scorer": name, "query": np.arange(len(figures[metrics[0]]), dtype=np.int64),
                            **{m: figures[m] for m in metrics}}) for name, figures in per_query.items()]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["scorer", "query", *metrics])


def per_query_of(frame: pd.DataFrame) -> dict[str, dict[str, np.ndarray]]:
    """The inverse of :func:`per_query_frame`."""
    metrics = [c for c in frame.columns if c not in ("scorer", "query")]
    return {str(name): {m: rows.sort_values("query")[m].to_numpy(np.float64) for m in metrics}
            for name, rows in frame.groupby("scorer", sort=False)}


def paired_differences(per_query: dict[str, dict[str, np.ndarray]], pairs: dict[str, tuple[str, str]],
                       metrics: Iterable[str] = COMPARED_METRICS, seed: int = 0, replicates: int = 1000) -> dict[str, dict]:
    """Point differences and paired 95 % bootstrap intervals over the test queries
    (:func:`~hir.models.metrics.paired_bootstrap`) for each ``{name: (scorer, other)}`` of ``pairs``
    whose two scorers ran on the same queries, from :func:`run_scorers`' ``per_query``. Returns
    ``{"diff": {name: {metric: value}}, "diff_ci": {name: {metric: [low, high]}}}``."""
    metrics = tuple(metrics)

    def comparable(a: str, b: str) -> bool:  # both ran, on the same queries (not a stale materialisation's)
        return a in per_query and b in per_query and all(len(per_query[a][m]) == len(per_query[b][m]) for m in metrics)

    ran = {name: pair for name, pair in pairs.items() if comparable(*pair)}
    diff = {name: {m: round(float(per_query[a][m].mean() - per_query[b][m].mean()), 6) for m in metrics}
            for name, (a, b) in ran.items()}
    ci = {name: {m: [round(x, 6) for x in paired_bootstrap(per_query[a][m], per_query[b][m], replicates, seed)] for m in metrics}
          for name, (a, b) in ran.items()}
    return {"diff": diff, "diff_ci": ci}


def beating_every_baseline(hir: dict[str, dict], baselines: dict[str, dict], metrics=("recall@10", "ndcg@10")) -> list[str]:
    """The hir scorers strictly above every baseline on every one of ``metrics`` (rows of :func:`run_scorers`)."""
    return sorted(name for name, row in hir.items()
                  if all(row[m] > other[m] for other in baselines.values() for m in metrics))
