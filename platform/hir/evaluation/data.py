"""Evaluation inputs read from a data home: the split of a partition and hir's own scorers.

* :func:`read_events` — warehouse events with their endpoints' types and source keys.
* :func:`partition_split` — the temporal split of partition ``D`` (cut-off ``T``): scorers train on
  events before ``T`` and are tested on the target events of the test window
  ``[T + val_days, T + val_days + test_days)`` (the validation window is left out, as in
  ``eval_windows``). Targets: :data:`TARGETS` by source kind, else purchases; a source with none
  of its target events predicts its most frequent user event.
* :func:`hir_factories` — hir's scorers on a split: ``hir`` (the user's and item's entity
  embeddings at ``T``, cosine over the encoder's InfoNCE temperature plus the item's log prior:
  :class:`~hir.models.baselines.PriorCorrectedScorer`), ``hir_recent`` (the same with the user's
  last items' embeddings as the query), ``hir_no_prior`` (the plain dot product, the ablation of
  the prior), ``hir_engagement`` (``hir``'s top :data:`ENGAGEMENT_CANDIDATES` re-ranked by the
  encoder's engagement head for the target event type, :class:`~hir.models.baselines.EngagementRerankScorer`),
  ``hir_seq`` (where the run trains SASRec: the same sequence model with its item table started
  from hir's item embeddings, so the pair measures what hir's representation adds to it) and
  ``hir_bom`` (Bag-of-Meaning overlap ``Σ_t q_t(u) w_t(i)`` of the partition's token bags, the
  score the BoM index computes).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from hir.errors import SourceError
from hir.evaluation.protocols import (
    TEMPORAL_TARGETS,
    Split,
    TemporalTarget,
    embedding_scorer,
    popularity_half_life,
    temporal_split,
)
from hir.graph.snapshot import window_bounds
from hir.models.baselines import (
    EngagementRerankScorer,
    PriorCorrectedScorer,
    SASRecScorer,
)
from hir.settings import Settings

ENGAGEMENT_CANDIDATES = 200  # hir_engagement: the candidates the engagement head re-ranks
RECENT_WEIGHTS = (1.0, 0.5, 0.25)  # hir_recent's query: the user's last items, as the co-occurrence baseline weighs them
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
    return split


def read_entity_vectors(path: Path, entity_type: str) -> tuple[np.ndarray, np.ndarray]:
    """Source keys and ``[n, d]`` embeddings of ``entity_type`` in an ``embeddings.parquet``."""
    table = pq.read_table(path, columns=["entity_type", "source_key", "embedding"]).to_pandas()
    rows = table[table["entity_type"] == entity_type]
    vectors = np.stack(rows["embedding"].to_numpy()) if len(rows) else np.zeros((0, 1), np.float32)
    return rows["source_key"].astype(str).to_numpy(), vectors.astype(np.float32)


def bag_vectors(tokens_path: Path, entity_type: str, vocabulary: dict[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Source keys and dense ``[n, |vocabulary|]`` token-weight rows of ``entity_type``'s bags."""
    table = pq.read_table(tokens_path, columns=["entity_type", "source_key", "tokens", "weights"]).to_pandas()
    rows = table[table["entity_type"] == entity_type]
    out = np.zeros((len(rows), len(vocabulary)), dtype=np.float32)
    for n, (tokens, weights) in enumerate(zip(rows["tokens"], rows["weights"])):
        for t, w in zip(tokens, weights):
            out[n, vocabulary[int(t)]] += float(w)
    return rows["source_key"].astype(str).to_numpy(), out


def encoder_temperature(artifacts_dir: Path, partition: str) -> float:
    """``T`` of the InfoNCE the partition's encoder was trained with (its ``config.json``)."""
    config = Path(artifacts_dir) / "hir_encoder" / partition / "config.json"
    if not config.exists():
        raise SourceError(f"hir_encoder {partition} has no checkpoint config at {config}; materialise it first")
    return float(json.loads(config.read_text(encoding="utf-8"))["train"]["nce_temperature"])


def engagement_head(artifacts_dir: Path, partition: str, split: Split):
    """The partition's trained engagement head and the type id of the split's target event, or
    ``None`` when the snapshot has no edge of a target type (nothing to score)."""
    from hir.models.trainer import load_model

    meta = Path(artifacts_dir) / "graph_snapshot" / partition / "meta.json"
    if not meta.exists():
        raise SourceError(f"graph_snapshot {partition} has no meta.json at {meta}; materialise it first")
    edge_types = json.loads(meta.read_text(encoding="utf-8"))["edge_types"]
    wanted = split.info.get("target_events") or sorted(DEFAULT_TARGET.event_types)
    present = [edge_types.index(t) for t in wanted if t in edge_types]
    if not present:
        return None
    model = load_model(Path(artifacts_dir) / "hir_encoder" / partition, max(1, len(edge_types)))
    return model.engagement, present[0]


def hir_factories(split: Split, artifacts_dir: Path, partition: str, settings: Settings,
                  user_keys: Callable[[np.ndarray], np.ndarray] = lambda k: k,
                  item_keys: Callable[[np.ndarray], np.ndarray] = lambda k: k,
                  sequence_config: Callable | None = None) -> dict[str, Callable]:
    """Constructors of hir's scorers on ``split`` from one partition's artefacts.

    Args:
        split: the evaluation split; artifacts_dir: the data home's artefacts (``entity_embeddings``,
            ``hir_encoder`` and ``bom_tokens`` of ``partition``; ``hir_bom`` is left out without
            tokens); settings: the half-life of the item prior (as the popularity baseline's);
        user_keys, item_keys: map the split's keys to the entities' source keys (identity by default).
        sequence_config: builds the run's :class:`~hir.models.baselines.SASRecConfig` (the SASRec
            baseline's, :func:`hir.evaluation.protocols.sasrec_config`) for ``hir_seq``; ``None`` leaves
            ``hir_seq`` out. Its width becomes the embeddings' when they differ.
    """
    item_type = split.info.get("item_type", "product")
    embeddings_path = Path(artifacts_dir) / "entity_embeddings" / partition / "embeddings.parquet"
    tokens_path = Path(artifacts_dir) / "bom_tokens" / partition / "tokens.parquet"
    factories = {}
    if embeddings_path.exists():
        u_keys, u_vec = read_entity_vectors(embeddings_path, "user")
        i_keys, i_vec = read_entity_vectors(embeddings_path, item_type)
        # the embeddings in the split's row order (zero rows for users and items without one)
        plain = embedding_scorer(_mapped(split, user_keys, item_keys), u_keys, u_vec, i_keys, i_vec, "hir_no_prior")
        users, items = plain.user_vectors, plain.item_vectors
        temperature = encoder_temperature(artifacts_dir, partition)
        half_life = popularity_half_life(split, settings)

        def corrected(name: str, recent_weights=None) -> Callable[[], PriorCorrectedScorer]:
            return lambda: PriorCorrectedScorer(users, items, temperature, half_life, name, recent_weights)

        factories["hir"] = corrected("hir")
        factories["hir_recent"] = corrected("hir_recent", RECENT_WEIGHTS)
        factories["hir_no_prior"] = lambda: plain
        engagement = engagement_head(artifacts_dir, partition, split)
        if engagement is not None:
            factories["hir_engagement"] = lambda: EngagementRerankScorer(
                factories["hir"](), users, items, *engagement, candidates=ENGAGEMENT_CANDIDATES, name="hir_engagement")
        if sequence_config is not None:
            def sequence() -> SASRecScorer:
                config = sequence_config()
                config.hidden = items.shape[1]
                return SASRecScorer(config, item_init=items, name="hir_seq")
            factories["hir_seq"] = sequence
    if tokens_path.exists():
        all_tokens = pq.read_table(tokens_path, columns=["tokens"]).column("tokens").combine_chunks().flatten()
        vocabulary = {int(t): n for n, t in enumerate(np.unique(all_tokens.to_numpy()))}
        if vocabulary:
            u_keys, u_bag = bag_vectors(tokens_path, "user", vocabulary)
            i_keys, i_bag = bag_vectors(tokens_path, item_type, vocabulary)
            factories["hir_bom"] = lambda: embedding_scorer(_mapped(split, user_keys, item_keys), u_keys, u_bag, i_keys, i_bag, "hir_bom")
    return factories


def _mapped(split: Split, user_keys, item_keys) -> Split:
    """A shallow view of ``split`` whose keys are the entities' source keys."""
    return Split(split.train, split.validation, split.test, item_keys(split.item_keys), user_keys(split.user_keys))
