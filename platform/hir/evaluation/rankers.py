"""Downstream rankers (click and conversion) with and without hir features (DESIGN §10).

Examples are exposures in a window after the cut-off ``T``: one per distinct (user, item) pair,
at its first exposure, labelled 1 when a positive event on the same pair follows in the window.
Tasks: ``click`` (exposure ``impression``, positive ``click``), ``conversion`` (exposure
``click``, positive ``conversion``), or, for sources without ads (e.g. Taobao), ``conversion`` =
purchase among viewed items (exposure ``pv``/``view``, positive ``buy``/``purchase``).

The ranker is trained on the validation window ``[T, T + val_days)`` and evaluated on the test
window: both sit after ``T``, so the features known at that moment are exactly those of the
partition (hir features timestamped ``T``; base features from events before ``T``) and neither
set sees its own labels. A model trained on impressions before ``T`` would meet hir features
computed from graphs that hold its labels.

Base features: the user's and item's exposures, positives and smoothed rate
``(pos + 1) / (exp + 10)`` before ``T``, the pair's earlier exposures, days since the user's and
the item's last event. hir features: ``<u, v>``, cosine, coarse interest match and ``PCA_COMPONENTS``
principal components of the user and item vectors (fitted on the training examples).

Metrics: AUC, log-loss and normalised entropy ``NE = logloss / H(p)`` with ``p`` the test window's
positive rate and ``H`` the binary entropy; lift = relative AUC and NE change of hir over base.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

PCA_COMPONENTS = 4
MIN_POSITIVES = 2
TASKS = (
    ("click", frozenset({"impression"}), frozenset({"click"})),
    ("conversion", frozenset({"click"}), frozenset({"conversion"})),
    ("conversion", frozenset({"pv", "view"}), frozenset({"buy", "purchase"})),
)


@dataclass
class Examples:
    """Exposure examples of one window: ``user_key, item_key, item_type, t`` (unix s), ``label``."""

    frame: pd.DataFrame


def window_examples(events: pd.DataFrame, start: float, end: float, exposure: frozenset, positive: frozenset) -> pd.DataFrame:
    """Examples of ``[start, end)`` from frame ``events`` (``user_key, item_key, item_type, event_type, t``)."""
    inside = events[(events["t"] >= start) & (events["t"] < end)]
    exposed = inside[inside["event_type"].isin(exposure)].sort_values("t").drop_duplicates(["user_key", "item_key"])
    positives = inside[inside["event_type"].isin(positive)].groupby(["user_key", "item_key"])["t"].max().rename("last_pos")
    out = exposed.join(positives, on=["user_key", "item_key"])
    out["label"] = (out["last_pos"] >= out["t"]).astype(np.int8)
    return out.drop(columns="last_pos").reset_index(drop=True)


def base_features(examples: pd.DataFrame, history: pd.DataFrame, exposure: frozenset, positive: frozenset, cutoff: float) -> pd.DataFrame:
    """Count, rate and recency features from ``history`` (events before ``cutoff``); see the module docstring."""
    exp = history[history["event_type"].isin(exposure)]
    pos = history[history["event_type"].isin(positive)]
    out = pd.DataFrame(index=examples.index)
    for side in ("user_key", "item_key"):
        n_exp = examples[side].map(exp.groupby(side).size()).fillna(0.0)
        n_pos = examples[side].map(pos.groupby(side).size()).fillna(0.0)
        out[f"{side}_exposures"], out[f"{side}_positives"] = n_exp, n_pos
        out[f"{side}_rate"] = (n_pos + 1.0) / (n_exp + 10.0)
        last = examples[side].map(history.groupby(side)["t"].max())
        out[f"{side}_days_since"] = ((cutoff - last) / 86_400.0).fillna(-1.0)
    pair = exp.groupby(["user_key", "item_key"]).size().rename("pair_exposures")
    out["pair_exposures"] = examples.join(pair, on=["user_key", "item_key"])["pair_exposures"].fillna(0.0).to_numpy()
    return out


def hir_features(frame: pd.DataFrame, pca=None):
    """Features from columns ``user_vec``, ``item_vec`` (arrays or None), ``user_coarse``, ``item_coarse``.

    Returns ``(features, pca)``; ``pca`` is fitted here when not given (on the training examples).
    """
    from sklearn.decomposition import PCA

    dim = next((len(v) for v in frame["user_vec"] if v is not None), None) or next((len(v) for v in frame["item_vec"] if v is not None), 1)

    def stack(column):
        return np.stack([np.asarray(v, np.float32) if v is not None else np.full(dim, np.nan, np.float32) for v in frame[column]]) \
            if len(frame) else np.zeros((0, dim), np.float32)

    u, v = stack("user_vec"), stack("item_vec")
    out = pd.DataFrame(index=frame.index)
    out["hir_dot"] = np.sum(u * v, axis=1)
    norms = np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1)
    out["hir_cosine"] = out["hir_dot"] / np.where(norms > 0, norms, np.nan)
    out["hir_coarse_match"] = (frame["user_coarse"].to_numpy() == frame["item_coarse"].to_numpy()).astype(np.float32)
    both = np.concatenate([np.nan_to_num(u), np.nan_to_num(v)], axis=1)
    n = min(PCA_COMPONENTS, both.shape[1], max(len(both) - 1, 1))
    if pca is None:
        pca = PCA(n_components=n, random_state=0).fit(both)
    for k, column in enumerate(pca.transform(both).T):
        out[f"hir_pc{k}"] = column
    return out, pca


def binary_metrics(y: np.ndarray, p: np.ndarray) -> dict:
    """AUC, log-loss and normalised entropy of probabilities ``p`` for labels ``y``."""
    from sklearn.metrics import log_loss, roc_auc_score

    p = np.clip(p, 1e-7, 1 - 1e-7)
    rate = float(np.mean(y))
    entropy = -(rate * np.log(rate) + (1 - rate) * np.log(1 - rate))
    loss = float(log_loss(y, p, labels=[0, 1]))
    return {"auc": round(float(roc_auc_score(y, p)), 6), "logloss": round(loss, 6), "ne": round(loss / entropy, 6)}


def fit_predict(train_x: pd.DataFrame, train_y: np.ndarray, test_x: pd.DataFrame, seed: int) -> np.ndarray:
    """HistGradientBoostingClassifier fitted on ``train`` (early stopping off): ``P(y = 1)`` of ``test``."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    model = HistGradientBoostingClassifier(max_iter=100, learning_rate=0.1, max_leaf_nodes=15,
                                           l2_regularization=1.0, early_stopping=False, random_state=seed)
    model.fit(train_x.to_numpy(np.float64), train_y)
    return model.predict_proba(test_x.to_numpy(np.float64))[:, 1]


def fit_and_score(train_x: pd.DataFrame, train_y: np.ndarray, test_x: pd.DataFrame, test_y: np.ndarray, seed: int) -> dict:
    """:func:`fit_predict`, metrics on ``test``."""
    return binary_metrics(test_y, fit_predict(train_x, train_y, test_x, seed))


def _lift(base: dict, with_hir: dict) -> dict:
    return {"auc": round(with_hir["auc"] / base["auc"] - 1.0, 6), "ne": round(1.0 - with_hir["ne"] / base["ne"], 6)}


def evaluate_task(events: pd.DataFrame, bounds: dict, exposure: frozenset, positive: frozenset,
                  features: Callable[[pd.DataFrame], pd.DataFrame], seed: int) -> dict:
    """One task: train on the validation window, test on the test window, base vs base + hir.

    Args:
        events: ``user_key, item_key, item_type, event_type, t`` up to the test window's end.
        bounds: unix seconds ``cutoff``, ``test_start``, ``test_end``.
        features: adds ``user_vec, item_vec, user_coarse, item_coarse`` to an examples frame
            (point-in-time: the vectors known at each example's moment).
        seed: the classifier's seed.
    Returns the metrics, or ``{"status": "not applicable", "reason": ...}``.
    """
    train = window_examples(events, bounds["cutoff"], bounds["test_start"], exposure, positive)
    test = window_examples(events, bounds["test_start"], bounds["test_end"], exposure, positive)
    counts = {"train_examples": len(train), "train_positives": int(train["label"].sum()) if len(train) else 0,
              "test_examples": len(test), "test_positives": int(test["label"].sum()) if len(test) else 0}
    for name in ("train", "test"):
        n, k = counts[f"{name}_examples"], counts[f"{name}_positives"]
        if k < MIN_POSITIVES or n - k < MIN_POSITIVES:
            return {"status": "not applicable", "reason": f"{name} window has {k} positives of {n}", **counts}
    history = events[events["t"] < bounds["cutoff"]]
    base_train = base_features(train, history, exposure, positive, bounds["cutoff"])
    base_test = base_features(test, history, exposure, positive, bounds["cutoff"])
    hir_train, pca = hir_features(features(train))
    hir_test, _ = hir_features(features(test), pca)
    base = fit_and_score(base_train, train["label"].to_numpy(), base_test, test["label"].to_numpy(), seed)
    both = fit_and_score(pd.concat([base_train, hir_train], axis=1), train["label"].to_numpy(),
                         pd.concat([base_test, hir_test], axis=1), test["label"].to_numpy(), seed)
    return {"status": "ok", **counts, "base": base, "with_hir": both, "lift": _lift(base, both)}


def evaluate_rankers(events: pd.DataFrame, bounds: dict, features: Callable[[pd.DataFrame], pd.DataFrame], seed: int) -> dict:
    """``{"click": ..., "conversion": ...}`` for the tasks whose exposure events exist in ``events``."""
    present = set(events["event_type"].unique())
    results = {}
    for name, exposure, positive in TASKS:
        if name in results or not (exposure & present and positive & present):
            continue
        result = evaluate_task(events, bounds, exposure, positive, features, seed)
        result["task"] = f"{'/'.join(sorted(positive & present))} after {'/'.join(sorted(exposure & present))}"
        results[name] = result
    for name in ("click", "conversion"):
        results.setdefault(name, {"status": "not applicable", "reason": "the source has no such exposure and outcome events"})
    return results


def embedding_lookup(embeddings: pd.DataFrame) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """``features`` for :func:`evaluate_rankers` from one partition's embeddings frame
    (``entity_type, source_key, embedding, coarse_prototype``), all timestamped at ``T``."""
    by_key = embeddings.set_index(["entity_type", "source_key"])

    def features(examples: pd.DataFrame) -> pd.DataFrame:
        out = examples.copy()
        users = pd.MultiIndex.from_arrays([["user"] * len(out), out["user_key"].astype(str)])
        items = pd.MultiIndex.from_arrays([out["item_type"].astype(str), out["item_key"].astype(str)])
        u, i = by_key.reindex(users), by_key.reindex(items)
        out["user_vec"] = [v if isinstance(v, np.ndarray) else None for v in u["embedding"]]
        out["item_vec"] = [v if isinstance(v, np.ndarray) else None for v in i["embedding"]]
        out["user_coarse"] = u["coarse_prototype"].to_numpy(np.float64)
        out["item_coarse"] = i["coarse_prototype"].to_numpy(np.float64)
        return out

    return features


def feast_lookup(feast, entity_types: list[str]) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """``features`` for :func:`evaluate_rankers` read point-in-time from Feast
    (``FeastStore.training_set``): each example gets the features of the newest cut-off at or
    before its moment. ``entity_types``: item types with a feature view (besides ``user``)."""
    from hir.serving.feast_store import join_key, view_name

    def features(examples: pd.DataFrame) -> pd.DataFrame:
        out = examples.copy()
        out["user_vec"], out["item_vec"] = None, None
        out["user_coarse"], out["item_coarse"] = np.nan, np.nan
        stamps = pd.to_datetime(out["t"], unit="s", utc=True).dt.floor("us").astype("datetime64[us, UTC]")
        users = feast.training_set(pd.DataFrame({join_key("user"): out["user_key"].astype(str), "event_timestamp": stamps}),
                                   [f"{view_name('user')}:hir_embedding", f"{view_name('user')}:coarse_interest"])
        out["user_vec"] = list(users[f"{view_name('user')}__hir_embedding"])
        out["user_coarse"] = users[f"{view_name('user')}__coarse_interest"].to_numpy(np.float64)
        for item_type in entity_types:
            rows = np.flatnonzero(out["item_type"].to_numpy() == item_type)
            if not len(rows):
                continue
            got = feast.training_set(pd.DataFrame({join_key(item_type): out["item_key"].iloc[rows].astype(str).to_numpy(),
                                                   "event_timestamp": stamps.iloc[rows].to_numpy()}),
                                     [f"{view_name(item_type)}:hir_embedding", f"{view_name(item_type)}:coarse_interest"])
            vecs = list(got[f"{view_name(item_type)}__hir_embedding"])
            for r, v in zip(rows, vecs):
                out.at[out.index[r], "item_vec"] = v
            out.loc[out.index[rows], "item_coarse"] = got[f"{view_name(item_type)}__coarse_interest"].to_numpy(np.float64)
        for column in ("user_vec", "item_vec"):
            out[column] = [np.asarray(v, np.float32) if v is not None and not (np.isscalar(v) and pd.isna(v)) else None for v in out[column]]
        return out

    return features


def ranker_events(con, end) -> pd.DataFrame:
    """User → item events before ``end`` as ``user_key, item_key, item_type, event_type, t``."""
    from hir.evaluation.data import read_events

    ev = read_events(con, end)
    ev = ev[ev["src_type"] == "user"]
    t = (pd.to_datetime(ev["ts"], utc=True) - pd.Timestamp(0, tz="UTC")).dt.total_seconds()
    return pd.DataFrame({"user_key": ev["src_key"].astype(str).to_numpy(), "item_key": ev["dst_key"].astype(str).to_numpy(),
                         "item_type": ev["dst_type"].astype(str).to_numpy(), "event_type": ev["event_type"].astype(str).to_numpy(),
                         "t": t.to_numpy()})
