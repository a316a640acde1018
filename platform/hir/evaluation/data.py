"""Evaluation inputs read from a data home: the split of a partition and its artefacts.

* :func:`read_events` — warehouse events with their endpoints' types and source keys.
* :func:`partition_split` — the temporal split of partition ``D`` (cut-off ``T``): scorers train on
  events before ``T`` and are tested on the target events of the test window
  ``[T + val_days, T + val_days + test_days)``; the target events of the validation window
  ``[T, T + val_days)`` are the split's ``window_validation`` (hir's scorers choose their
  temperature there), and no scorer trains on them. Targets: :data:`TARGETS` by source kind, else purchases; a source with none
  of its target events predicts its most frequent user event.
* the artefacts hir's scorers (:mod:`hir.evaluation.scorers`) are built from: entity embeddings,
  token bags and their vocabulary, the encoder's InfoNCE temperature and its engagement head.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from hir.errors import SourceError
from hir.evaluation.protocols import (
    TEMPORAL_TARGETS,
    Split,
    TemporalTarget,
    temporal_split,
    window_queries,
)
from hir.graph.snapshot import window_bounds
from hir.settings import Settings
from hir.storage import META_FILE, Artifacts

DEFAULT_TARGET = TemporalTarget(frozenset({"purchase", "buy", "conversion"}))
# amazon_seq: every interaction is a purchase; the user's earlier items are masked (leave-last-out).
TARGETS = {**TEMPORAL_TARGETS, "amazon_seq": TemporalTarget(frozenset({"purchase"}), mask_seen=True)}

_EVENTS = """
SELECT s.entity_type AS src_type, s.source_key AS src_key, d.entity_type AS dst_type,
       d.source_key AS dst_key, e.event_type, e.ts, e.value
FROM events e JOIN entities s ON s.entity_id = e.src JOIN entities d ON d.entity_id = e.dst
WHERE e.ts < ?
"""


def read_events(con, end: datetime) -> pd.DataFrame:
    """Events before ``end``: ``src_type, src_key, dst_type, dst_key, event_type, ts, value``."""
    return con.execute(_EVENTS, [end]).fetch_df()


def partition_split(con, cutoff: datetime, settings: Settings) -> Split:
    """The temporal split at ``cutoff`` tested on the test window (see the module docstring).

    Args:
        con: a read-only warehouse connection; cutoff: ``T``; settings: source kind, windows.
    """
    bounds = window_bounds(cutoff, settings)
    events = read_events(con, bounds["test_end"])
    stamps = pd.to_datetime(events["ts"], utc=True)
    keep = (stamps < pd.Timestamp(cutoff)) | (stamps >= pd.Timestamp(bounds["test_start"]))
    entities = con.execute("SELECT entity_type, source_key FROM entities").fetch_df()
    content = con.execute(
        "SELECT n.entity_type, n.source_key, c.text FROM content c JOIN entities n USING (entity_id)"
    ).fetch_df()
    target = TARGETS.get(settings.source, DEFAULT_TARGET)
    user_events = events.loc[events["src_type"] == "user", "event_type"]
    if len(user_events) and not user_events.isin(target.event_types).any():
        # a source without purchases (e.g. a csv mapping): predict its most frequent user event
        target = TemporalTarget(frozenset({str(user_events.mode().iloc[0])}))
    split = temporal_split(events[keep].reset_index(drop=True), entities, content, target,
                           settings.test_days, cutoff=cutoff.timestamp())
    split.info["test_window"] = [bounds["test_start"].isoformat(), bounds["test_end"].isoformat()]
    split.window_validation = window_queries(split, events[~keep], target)
    split.info["window_validation_queries"] = len(split.window_validation.users)
    return split


def read_entity_vectors(path: Path, entity_type: str) -> tuple[np.ndarray, np.ndarray]:
    """Source keys and ``[n, d]`` embeddings of ``entity_type`` in an ``embeddings.parquet``."""
    table = pq.read_table(path, columns=["entity_type", "source_key", "embedding"]).to_pandas()
    rows = table[table["entity_type"] == entity_type]
    vectors = np.stack(rows["embedding"].to_numpy()) if len(rows) else np.zeros((0, 1), np.float32)
    return rows["source_key"].astype(str).to_numpy(), vectors.astype(np.float32)


def bag_vectors(tokens_path: Path, entity_type: str, vocabulary: dict[int, int]):
    """Source keys and the sparse ``[n, |vocabulary|]`` token-weight rows (scipy CSR) of
    ``entity_type``'s bags."""
    import scipy.sparse as sp

    table = pq.read_table(tokens_path, columns=["entity_type", "source_key", "tokens", "weights"]).to_pandas()
    rows = table[table["entity_type"] == entity_type]
    lengths = rows["tokens"].map(len).to_numpy()
    flat = np.concatenate([np.asarray(t, np.int64) for t in rows["tokens"]]) if len(rows) else np.zeros(0, np.int64)
    weights = np.concatenate([np.asarray(w, np.float32) for w in rows["weights"]]) if len(rows) else np.zeros(0, np.float32)
    columns = np.asarray([vocabulary[int(t)] for t in flat], dtype=np.int64)
    matrix = sp.csr_matrix((weights, (np.repeat(np.arange(len(rows)), lengths), columns)), shape=(len(rows), len(vocabulary)))
    return rows["source_key"].astype(str).to_numpy(), matrix


def token_vocabulary(tokens_path: Path) -> dict[int, int]:
    """``{token: column}`` over every token of a ``tokens.parquet``, in token order: the columns of
    :func:`bag_vectors`' rows."""
    all_tokens = pq.read_table(tokens_path, columns=["tokens"]).column("tokens").combine_chunks().flatten()
    return {int(t): n for n, t in enumerate(np.unique(all_tokens.to_numpy()))}


def bag_temperature(tokens_path: Path) -> float:
    """``τ`` of the bags' overlap (:func:`hir.tokens.bom.bag_temperature`), stored with the bags."""
    meta = pq.read_schema(tokens_path).metadata or {}
    return float(meta[b"bag_temperature"])


def encoder_temperature(artifacts: Artifacts, partition: str) -> float:
    """``T`` of the InfoNCE the partition's encoder was trained with (its checkpoint's config)."""
    from hir.models.checkpoint import read_configs

    folder = artifacts.encoder_dir(partition)
    try:
        train, _, _ = read_configs(folder)
    except FileNotFoundError:
        raise SourceError(f"hir_encoder {partition} has no checkpoint config in {folder}; materialise it first") from None
    return float(train.nce_temperature)


def engagement_head(artifacts: Artifacts, partition: str, split: Split):
    """The partition's trained engagement head and the type id of the split's target event, or
    ``None`` when the snapshot has no edge of a target type (nothing to score)."""
    from hir.models.checkpoint import load_model

    meta = artifacts.snapshot_dir(partition) / META_FILE
    if not meta.exists():
        raise SourceError(f"graph_snapshot {partition} has no meta.json at {meta}; materialise it first")
    edge_types = json.loads(meta.read_text(encoding="utf-8"))["edge_types"]
    wanted = split.info.get("target_events") or sorted(DEFAULT_TARGET.event_types)
    present = [edge_types.index(t) for t in wanted if t in edge_types]
    if not present:
        return None
    model = load_model(artifacts.encoder_dir(partition), max(1, len(edge_types)))
    return model.engagement, present[0]
