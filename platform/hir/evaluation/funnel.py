"""Deep-funnel conversion ranker with three arms (DESIGN §10, issue #21).

Funnel. The setting ``funnel_stages`` orders event types, upper stages first
(``impression,view,pv < click,cart,fav < buy,purchase,conversion``); the last stage is the outcome.

Examples of a window ``[a, b)``: every (user, item) pair with an upper-stage event in the window,
exposed at the first event of the lowest stage it reaches there (its view, or its cart/fav where
there is no view), labelled 1 when an outcome event of the pair follows at or after that moment,
inside the window. The ranker trains on the validation window ``[T, T + v)`` and is tested on the
test window ``[T + v, T + v + t)`` of the partition with cut-off ``T``.

Features are read as a ranker in production gets them: through Feast's point-in-time
``get_historical_features`` at each example's moment (:func:`read_features`), from rows dated at
cut-offs (a row dated ``T`` holds what was known before ``T``).

* base (the example's exposure stage, and views ``funnel_user``, ``funnel_item``, ``funnel_pair``
  from the events before ``T``): events per stage of the user, the item and the pair; the user's
  and item's conversion rate ``(outcomes + 1) / (upper events + 10)``; days since their last event;
  the user's distinct items; the item's age in days.
* hir (``user_features`` and ``<item type>_features`` of ``feature_tables``): ``<u, v>``, cosine,
  ``PCA_COMPONENTS`` principal components of ``[u; v]`` (fitted on the training examples), coarse
  interest match, and the weighted token overlap ``Σ_{k ∈ B_u ∩ B_v} w_u(k) w_v(k)`` of the bags.
* control, as many features made without hir (views ``funnel_user_control``,
  ``funnel_item_control``, ``funnel_pair``): the same dense features from ALS factors, a cluster
  match from k-means on them with as many clusters as hir has coarse interests, and the item
  co-occurrence score ``s_ui = Σ_j w_j C[h_j, i]`` of the user's last items ``h_j``
  (:class:`~hir.models.baselines.cooccurrence.CooccurrenceScorer`).

Each arm is the same :func:`~hir.evaluation.rankers.fit_predict` ranker on base, base + hir and
base + control. Metrics (:mod:`hir.evaluation.bootstrap`): AUC, log-loss and NE with 95 % intervals
over users, for each arm and the paired differences hir − base and hir − control, on all test
examples and on slices: items first seen after the cut-off (``cold_items``), users with fewer than
``LIGHT_USER_EVENTS`` earlier events (``light_users``), and the top decile of the test users by
earlier events (``heavy_users``).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from hir.evaluation.bootstrap import ScoredSet, bootstrap_arms
from hir.evaluation.rankers import MIN_POSITIVES, fit_predict, hir_features

DAY = 86_400.0
LIGHT_USER_EVENTS = 5
HEAVY_USER_QUANTILE = 0.9
BOOTSTRAP_REPLICATES = 300
CONVERSION_PRIOR = (1.0, 10.0)  # rate = (outcomes + a) / (upper events + b)
ARMS = ("base", "hir", "control")
DIFFERENCES = {"hir_minus_base": ("hir", "base"), "hir_minus_control": ("hir", "control")}
SLICES = ("cold_items", "light_users", "heavy_users")
VIEWS = ("funnel_user", "funnel_item", "funnel_pair", "funnel_user_control", "funnel_item_control")
FEATURE_ASSET = "funnel_features"  # <artifacts>/funnel_features/<D>/<view>.parquet
SCORES_FILE = "funnel_scores.parquet"
HIR_COLUMNS = ("hir_embedding", "coarse_interest", "bom_tokens", "bom_weights")


def parse_stages(text: str) -> list[frozenset[str]]:
    """``"view<cart,fav<buy"`` → ``[{view}, {cart, fav}, {buy}]`` (stages by ``<``, types by ``,``)."""
    stages = [frozenset(t.strip() for t in part.split(",") if t.strip()) for part in text.split("<")]
    return [s for s in stages if s]


def stage_of(events: pd.DataFrame, stages: list[frozenset[str]]) -> pd.Series:
    """Each event's stage index (``-1`` for event types outside the funnel)."""
    index = {t: k for k, stage in enumerate(stages) for t in stage}
    return events["event_type"].map(index).fillna(-1).astype(np.int64)


def funnel_examples(events: pd.DataFrame, start: float, end: float, stages: list[frozenset[str]]) -> pd.DataFrame:
    """Examples of ``[start, end)`` (module docstring): ``user_key, item_key, item_type, t, stage, label``.

    ``events``: ``user_key, item_key, item_type, event_type, t`` (unix seconds).
    """
    inside = events[(events["t"] >= start) & (events["t"] < end)].assign(stage=lambda f: stage_of(f, stages))
    last = len(stages) - 1
    upper = inside[(inside["stage"] >= 0) & (inside["stage"] < last)]
    exposed = upper.sort_values(["stage", "t"], kind="mergesort").drop_duplicates(["user_key", "item_key"])
    outcomes = inside[inside["stage"] == last].groupby(["user_key", "item_key"])["t"].max().rename("last_outcome")
    out = exposed.join(outcomes, on=["user_key", "item_key"])
    out["label"] = (out["last_outcome"] >= out["t"]).astype(np.int8)
    columns = ["user_key", "item_key", "item_type", "t", "stage", "label"]
    return out[columns].sort_values(["t", "user_key", "item_key"]).reset_index(drop=True)


def _stage_counts(history: pd.DataFrame, keys: list[str], n_stages: int) -> pd.DataFrame:
    counts = history.groupby(keys + ["stage"]).size().unstack(fill_value=0)
    counts = counts.reindex(columns=range(n_stages), fill_value=0).astype(np.float64)
    return counts.set_axis([f"stage{k}_events" for k in range(n_stages)], axis=1)


def _side_table(history: pd.DataFrame, key: str, n_stages: int, cutoff: float) -> pd.DataFrame:
    """Per-user or per-item base features (module docstring) from ``history`` before ``cutoff``."""
    out = _stage_counts(history, [key], n_stages)
    upper = out.iloc[:, :-1].sum(axis=1)
    out["conversion_rate"] = (out.iloc[:, -1] + CONVERSION_PRIOR[0]) / (upper + CONVERSION_PRIOR[1])
    times = history.groupby(key)["t"]
    out["days_since_last"] = (cutoff - times.max()) / DAY
    if key == "user_key":
        out["distinct_items"] = history.groupby(key)["item_key"].nunique().astype(np.float64)
    else:
        out["age_days"] = (cutoff - times.min()) / DAY
    return out


def base_tables(history: pd.DataFrame, pairs: pd.DataFrame, n_stages: int, cutoff: float) -> dict[str, pd.DataFrame]:
    """``funnel_user``, ``funnel_item`` and ``funnel_pair`` (for ``pairs``) from ``history`` (with ``stage``)."""
    pair_counts = _stage_counts(history, ["user_key", "item_key"], n_stages)
    pair_last = (cutoff - history.groupby(["user_key", "item_key"])["t"].max()) / DAY
    wanted = pd.MultiIndex.from_frame(pairs[["user_key", "item_key"]])
    pair = pair_counts.reindex(wanted).fillna(0.0)
    pair["days_since_last"] = pair_last.reindex(wanted).to_numpy()
    return {"funnel_user": _side_table(history, "user_key", n_stages, cutoff),
            "funnel_item": _side_table(history, "item_key", n_stages, cutoff),
            "funnel_pair": pair}


def control_tables(history: pd.DataFrame, pairs: pd.DataFrame, clusters: int, seed: int, threads: int) -> dict[str, pd.DataFrame]:
    """ALS factors and k-means clusters per user and item, and the co-occurrence score of ``pairs``."""
    from sklearn.cluster import KMeans

    from hir.models.baselines.als import ALSScorer

    train, users, items = _interactions(history)
    als = ALSScorer(seed=seed, threads=threads).fit(train)
    u, v = als.user_factors.numpy(), als.item_factors.numpy()
    both = np.vstack([u, v])
    k = max(1, min(clusters, len(both)))
    labels = KMeans(n_clusters=k, n_init=3, random_state=seed).fit_predict(both / np.maximum(np.linalg.norm(both, axis=1, keepdims=True), 1e-9))
    user = pd.DataFrame({"als_vector": list(u), "als_cluster": labels[:len(u)]}, index=pd.Index(users, name="user_key"))
    item = pd.DataFrame({"als_vector": list(v), "als_cluster": labels[len(u):]}, index=pd.Index(items, name="item_key"))
    return {"funnel_user_control": user, "funnel_item_control": item,
            "cooccurrence": pd.Series(_cooccurrence(train, users, items, pairs), index=pd.MultiIndex.from_frame(pairs[["user_key", "item_key"]]))}


def _interactions(history: pd.DataFrame):
    """``history`` as :class:`~hir.models.baselines.base.Interactions` with its user and item keys."""
    from hir.models.baselines.base import Interactions

    u_codes, users = pd.factorize(history["user_key"], sort=True)
    i_codes, items = pd.factorize(history["item_key"], sort=True)
    train = Interactions(u_codes, i_codes, history["t"].to_numpy(), len(users), len(items))
    return train, np.asarray(users), np.asarray(items)


def _cooccurrence(train, users: np.ndarray, items: np.ndarray, pairs: pd.DataFrame) -> np.ndarray:
    """``s_ui = Σ_j w_j C[h_j, i]`` for each pair; 0 where the user or item has no history."""
    import scipy.sparse as sp

    from hir.models.baselines.base import last_items
    from hir.models.baselines.cooccurrence import CooccurrenceScorer

    model = CooccurrenceScorer().fit(train)
    u = pd.Index(users).get_indexer(pairs["user_key"])
    i = pd.Index(items).get_indexer(pairs["item_key"])
    known = (u >= 0) & (i >= 0)
    out = np.zeros(len(pairs))
    if not known.any():
        return out
    query_users, row = np.unique(u[known], return_inverse=True)
    recent = last_items(train, query_users, len(model.weights))[:, ::-1]
    r, c = np.nonzero(recent >= 0)
    query = sp.csr_matrix((model.weights[c], (r, recent[r, c])), shape=(len(query_users), train.n_items))
    scores = (query @ model.pairs).tocsr()
    out[known] = np.asarray(scores[row, i[known]]).ravel()
    return out


def feature_tables(history: pd.DataFrame, pairs: pd.DataFrame, n_stages: int, cutoff: float, clusters: int,
                   seed: int, threads: int) -> dict[str, pd.DataFrame]:
    """Every funnel view's rows dated ``cutoff``, keyed by ``user_key`` and/or ``item_key``."""
    tables = base_tables(history, pairs, n_stages, cutoff)
    control = control_tables(history, pairs, clusters, seed, threads)
    tables["funnel_pair"]["cooccurrence"] = control.pop("cooccurrence").to_numpy()
    return tables | control


def write_feature_tables(tables: dict[str, pd.DataFrame], item_type: str, cutoff: float, out_dir: Path) -> None:
    """One Parquet file per view: the keys as ``user_key`` / ``<item_type>_key`` strings, ``cutoff``."""
    from hir.serving.feast_store import TIMESTAMP_FIELD, join_key
    from hir.storage import write_parquet

    stamp = pd.Timestamp(cutoff, unit="s", tz="UTC").as_unit("us")
    for view, table in tables.items():
        frame = table.reset_index().rename(columns={"item_key": join_key(item_type)})
        for key in ("user_key", join_key(item_type)):
            if key in frame:
                frame[key] = frame[key].astype(str)
        frame[TIMESTAMP_FIELD] = stamp
        write_parquet(Path(out_dir) / f"{view}.parquet", frame)


def feast_views(artifacts_dir: Path, item_type: str) -> list:
    """The funnel feature views over every partition's tables (schemas from the newest tables)."""
    import feast
    import pyarrow.parquet as pq
    from feast.data_format import ParquetFormat

    from hir.serving.feast_store import TIMESTAMP_FIELD, feast_objects, join_key
    from hir.storage import Artifacts

    catalogue = Artifacts(artifacts_dir)
    newest = catalogue.folder(FEATURE_ASSET, catalogue.latest(FEATURE_ASSET))
    entities = feast_objects(artifacts_dir)
    keys = {"user_key": entities["user_entity"], join_key(item_type): entities[f"{item_type}_entity"]}
    views = []
    for view in VIEWS:
        schema = pq.read_schema(newest / f"{view}.parquet")
        own = [keys[n] for n in schema.names if n in keys]
        source = feast.FileSource(name=f"{view}_source", path=str(catalogue.folder(FEATURE_ASSET, "[0-9]*") / f"{view}.parquet"),
                                  file_format=ParquetFormat(), timestamp_field=TIMESTAMP_FIELD)
        fields = [feast.Field(name=n, dtype=_feast_type(schema.field(n).type)) for n in schema.names
                  if n not in keys and n != TIMESTAMP_FIELD]
        views.append(feast.FeatureView(name=view, entities=own, source=source, schema=fields, online=False,
                                       description="deep-funnel ranker features dated at each cut-off", tags={"owner": "hir"}))
    return views


def _feast_type(arrow_type):
    import pyarrow as pa
    from feast.types import Array, Float32, Float64, Int64

    if pa.types.is_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        return Array(Float32)
    return Int64 if pa.types.is_integer(arrow_type) else Float64


def feature_refs(item_type: str, views: list) -> list[str]:
    """``view:feature`` references of hir's two views and every funnel view."""
    from hir.serving.feast_store import view_name

    refs = [f"{view_name(t)}:{c}" for t in ("user", item_type) for c in HIR_COLUMNS]
    return refs + [f"{v.name}:{f.name}" for v in views for f in v.features]


def read_features(feast, examples: pd.DataFrame, item_type: str, refs: list[str]) -> pd.DataFrame:
    """``examples`` with every ref joined point-in-time at its moment ``t`` (``FeastStore.training_set``)."""
    from hir.serving.feast_store import join_key

    entity_df = pd.DataFrame({"user_key": examples["user_key"].astype(str).to_numpy(),
                              join_key(item_type): examples["item_key"].astype(str).to_numpy(),
                              "event_timestamp": pd.to_datetime(examples["t"].to_numpy(), unit="s", utc=True).floor("us")})
    got = feast.training_set(entity_df, refs)
    return pd.concat([examples.reset_index(drop=True), got.drop(columns=list(entity_df.columns))], axis=1)


def _vectors(column: pd.Series) -> list:
    return [np.asarray(v, np.float32) if isinstance(v, (list, np.ndarray)) and len(v) else None for v in column]


def token_overlap(user_tokens, user_weights, item_tokens, item_weights) -> np.ndarray:
    """``Σ_{k ∈ B_u ∩ B_v} w_u(k) w_v(k)`` per row (0 where a bag is missing)."""
    out = np.zeros(len(user_tokens))
    for n, (tu, wu, ti, wi) in enumerate(zip(user_tokens, user_weights, item_tokens, item_weights)):
        if not isinstance(tu, (list, np.ndarray)) or not isinstance(ti, (list, np.ndarray)):
            continue
        item_bag = dict(zip(np.asarray(ti).tolist(), np.asarray(wi, np.float64).tolist()))
        out[n] = sum(w * item_bag[k] for k, w in zip(np.asarray(tu).tolist(), np.asarray(wu, np.float64).tolist()) if k in item_bag)
    return out


def _dense(frame: pd.DataFrame, user_view: str, item_view: str, vector: str, cluster: str, prefix: str, pca):
    dense = pd.DataFrame({"user_vec": _vectors(frame[f"{user_view}__{vector}"]), "item_vec": _vectors(frame[f"{item_view}__{vector}"]),
                          "user_coarse": frame[f"{user_view}__{cluster}"].to_numpy(np.float64),
                          "item_coarse": frame[f"{item_view}__{cluster}"].to_numpy(np.float64)}, index=frame.index)
    out, pca = hir_features(dense, pca)
    return out.rename(columns=lambda c: c.replace("hir_", prefix)), pca


def arm_features(frame: pd.DataFrame, item_type: str, fitted: dict | None = None) -> tuple[dict[str, pd.DataFrame], dict]:
    """The three arms' feature frames from a Feast-joined examples frame; ``fitted``: the training
    examples' PCA of each arm (fitted here when ``None``). Returns ``(arms, fitted)``."""
    from hir.serving.feast_store import view_name

    fitted = dict(fitted or {})
    base_views = ("funnel_user__", "funnel_item__", "funnel_pair__")
    base = frame[[c for c in frame.columns if c.startswith(base_views) and not c.endswith("__cooccurrence")]].astype(np.float64)
    base.insert(0, "exposure_stage", frame["stage"].to_numpy(np.float64))
    hir, fitted["hir"] = _dense(frame, view_name("user"), view_name(item_type), "hir_embedding", "coarse_interest", "hir_", fitted.get("hir"))
    u, i = view_name("user"), view_name(item_type)
    hir["hir_token_overlap"] = token_overlap(frame[f"{u}__bom_tokens"], frame[f"{u}__bom_weights"],
                                             frame[f"{i}__bom_tokens"], frame[f"{i}__bom_weights"])
    control, fitted["control"] = _dense(frame, "funnel_user_control", "funnel_item_control", "als_vector", "als_cluster",
                                        "control_", fitted.get("control"))
    control["control_cooccurrence"] = frame["funnel_pair__cooccurrence"].to_numpy(np.float64)
    arms = {"base": base, "hir": pd.concat([base, hir], axis=1), "control": pd.concat([base, control], axis=1)}
    return arms, fitted


def slice_flags(test: pd.DataFrame, history: pd.DataFrame) -> pd.DataFrame:
    """``cold_items``, ``light_users``, ``heavy_users`` of each test example (module docstring)."""
    user_events = test["user_key"].map(history.groupby("user_key").size()).fillna(0).to_numpy()
    seen_items = set(history["item_key"].unique())
    per_user = pd.Series(user_events, index=test["user_key"].to_numpy()).groupby(level=0).first()
    heavy = max(float(np.quantile(per_user, HEAVY_USER_QUANTILE)), 1.0) if len(per_user) else math.inf
    return pd.DataFrame({"cold_items": ~test["item_key"].isin(seen_items).to_numpy(),
                         "light_users": user_events < LIGHT_USER_EVENTS,
                         "heavy_users": user_events >= heavy}, index=test.index)


def outcome_item_type(events: pd.DataFrame, stages: list[frozenset[str]]) -> str | None:
    """The item type with the most outcome events (the ranker's items), or None without outcomes."""
    outcomes = events[events["event_type"].isin(stages[-1])] if stages else events.iloc[0:0]
    return str(outcomes["item_type"].mode().iloc[0]) if len(outcomes) else None


def score_partition(train: pd.DataFrame, test: pd.DataFrame, item_type: str, seed: int) -> pd.DataFrame:
    """Fit every arm's ranker on ``train`` (Feast-joined examples), return ``test``'s probabilities
    as columns ``p_<arm>`` beside ``user_key``, ``label``."""
    train_arms, fitted = arm_features(train, item_type)
    test_arms, _ = arm_features(test, item_type, fitted)
    out = test[["user_key", "item_key", "t", "label"]].copy()
    for arm in ARMS:
        out[f"p_{arm}"] = fit_predict(train_arms[arm], train["label"].to_numpy(), test_arms[arm], seed)
    return out


def scored_set(scores: pd.DataFrame, mask: np.ndarray | None = None) -> ScoredSet:
    """The :class:`ScoredSet` of a scores frame (``user_key``, ``label``, ``p_<arm>``)."""
    frame = scores if mask is None else scores[mask]
    _, users = np.unique(frame["user_key"].astype(str).to_numpy(), return_inverse=True)
    return ScoredSet(users, frame["label"].to_numpy(np.int64), {a: frame[f"p_{a}"].to_numpy(np.float64) for a in ARMS})


def summarise(scores: list[pd.DataFrame], seed: int, replicates: int = BOOTSTRAP_REPLICATES) -> dict:
    """Arms, paired differences and slices with user-bootstrap intervals, means over ``scores`` (one
    frame per partition, with the slice flags as boolean columns)."""
    out = bootstrap_arms([scored_set(s) for s in scores], DIFFERENCES, replicates, seed)
    out["slices"] = {name: bootstrap_arms([scored_set(s, s[name].to_numpy(bool)) for s in scores], DIFFERENCES, replicates, seed)
                     for name in SLICES}
    for name in SLICES:
        out["slices"][name]["share"] = round(float(np.mean(np.concatenate([s[name].to_numpy(bool) for s in scores]))), 6)
    return out


def evaluate_partition(events: pd.DataFrame, bounds: dict, stages: list[frozenset[str]], feast, write_tables,
                       settings) -> tuple[dict, pd.DataFrame | None]:
    """The funnel task of one partition, features through Feast.

    Args:
        events: ``user_key, item_key, item_type, event_type, t`` before the test window's end.
        bounds: unix seconds ``cutoff``, ``test_start``, ``test_end``.
        stages: :func:`parse_stages` of the setting.
        feast: the :class:`~hir.serving.feast_store.FeastStore` holding hir's feature tables.
        write_tables: ``callable(writer)`` that runs ``writer(out_dir)`` inside this partition's
            ``funnel_features`` folder (the artefact store's atomic partition write).
        settings: seed, threads and ``train_coarse`` (the control's cluster count).
    Returns ``(results, scores)``: metrics with intervals and counts (or ``status: not applicable``),
    and the test examples' probabilities and slice flags.
    """
    from threadpoolctl import threadpool_limits

    item_type = outcome_item_type(events, stages)
    if item_type is None or len(stages) < 2:
        return {"status": "not applicable", "reason": "no outcome events of the funnel's last stage"}, None
    events = events[events["item_type"] == item_type]
    train = funnel_examples(events, bounds["cutoff"], bounds["test_start"], stages)
    test = funnel_examples(events, bounds["test_start"], bounds["test_end"], stages)
    counts = {"item_type": item_type, "train_examples": len(train), "train_positives": int(train["label"].sum()),
              "test_examples": len(test), "test_positives": int(test["label"].sum())}
    for name, frame in (("train", train), ("test", test)):
        k = int(frame["label"].sum())
        if k < MIN_POSITIVES or len(frame) - k < MIN_POSITIVES:
            return {"status": "not applicable", "reason": f"{name} window has {k} positives of {len(frame)}", **counts}, None
    history = events[events["t"] < bounds["cutoff"]].assign(stage=lambda f: stage_of(f, stages))
    history = history[history["stage"] >= 0]
    with threadpool_limits(settings.threads):  # OpenMP/BLAS threads of ALS, k-means, boosting: the settings', not every core
        scores = _features_and_scores(history, train, test, len(stages), item_type, bounds["cutoff"], feast, write_tables, settings)
    scores = pd.concat([scores, slice_flags(test, history)], axis=1)
    return {"status": "ok", **counts, **summarise([scores], settings.seed)}, scores


def _features_and_scores(history, train, test, n_stages: int, item_type: str, cutoff: float, feast, write_tables,
                         settings) -> pd.DataFrame:
    """Publish the funnel views dated ``cutoff``, read every example's features from Feast, score the arms."""
    pairs = pd.concat([train, test])[["user_key", "item_key"]].drop_duplicates()
    tables = feature_tables(history, pairs, n_stages, cutoff, settings.train_coarse, settings.seed, settings.threads)
    write_tables(lambda out: write_feature_tables(tables, item_type, cutoff, out))
    views = feast_views(feast.artifacts_dir, item_type)
    feast.store().apply(views)
    refs = feature_refs(item_type, views)
    return score_partition(read_features(feast, train, item_type, refs), read_features(feast, test, item_type, refs),
                           item_type, settings.seed)


def funnel_table(summary: dict) -> str:
    """Markdown: AUC, log-loss, NE with intervals per arm, then the AUC differences per slice."""
    from hir.tables import markdown_table

    if "arms" not in summary:
        return f"not applicable: {summary.get('reason', 'not run')}"
    rows = [(arm, m["auc"], f"[{m['auc_ci'][0]:.4f}, {m['auc_ci'][1]:.4f}]", m["logloss"], m["ne"],
             f"[{m['ne_ci'][0]:.4f}, {m['ne_ci'][1]:.4f}]") for arm, m in summary["arms"].items()]
    for name in DIFFERENCES:
        d, ci = summary["diff"][name], summary["diff_ci"][name]
        rows.append((name.replace("_minus_", " − "), d["auc"], _bracket(ci["auc"]), d["logloss"], d["ne"], _bracket(ci["ne"])))
    table = markdown_table(["arm", "AUC", "AUC 95 % CI", "log-loss", "NE", "NE 95 % CI"], rows,
                           {"AUC": ".4f", "log-loss": ".4f", "NE": ".4f"})
    slices = [(name, s.get("share"), *(s["diff"][d]["auc"] if "diff" in s else None for d in DIFFERENCES),
               *(_bracket(s["diff_ci"][d]["auc"]) if "diff_ci" in s else s.get("reason") for d in DIFFERENCES))
              for name, s in summary["slices"].items()]
    heads = ["slice", "share", "AUC hir − base", "AUC hir − control", "CI hir − base", "CI hir − control"]
    return table + "\n\n" + markdown_table(heads, slices, {"share": ".3f", "AUC hir − base": "+.4f", "AUC hir − control": "+.4f"})


def _bracket(interval: list[float]) -> str:
    return f"[{interval[0]:+.4f}, {interval[1]:+.4f}]"


def lift_figure(summary: dict):
    """AUC lift of hir over base and over control, with 95 % intervals, on all examples and each slice."""
    from hir.plots import figure

    groups = {"all": summary} | summary.get("slices", {})
    fig, ax = figure(6.0, 3.2)
    for offset, name in ((-0.15, "hir_minus_base"), (0.15, "hir_minus_control")):
        xs, ys, errs = [], [], []
        for x, group in enumerate(groups.values()):
            if "diff" not in group:
                continue
            low, high = group["diff_ci"][name]["auc"]
            xs.append(x + offset)
            ys.append(group["diff"][name]["auc"])
            errs.append([ys[-1] - low, high - ys[-1]])
        ax.errorbar(xs, ys, yerr=np.array(errs).T if errs else None, fmt="o", capsize=3, label=name.replace("_minus_", " − "))
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xticks(range(len(groups)), list(groups))
    ax.set(ylabel="AUC difference", title="conversion ranker: hir's AUC lift per slice (95 % CI over users)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
