"""The scorers of an evaluation, listed in one place: the baselines (:func:`baseline_factories`,
models in :mod:`hir.models.baselines`) and hir's own (:func:`hir_factories`, built from one
partition's artefacts), plus the classes that turn hir's representations into scorers.

hir's scorers on a split:

* ``hir`` — the user's and item's entity embeddings at ``T``, cosine over the encoder's InfoNCE
  temperature plus the item's log prior (:class:`PriorCorrectedScorer`);
* ``hir_recent`` — the same with the user's last items' embeddings as the query;
* ``hir_no_prior`` — the plain dot product (:class:`EmbeddingScorer`), the ablation of the prior;
* ``hir_engagement`` — ``hir``'s top :data:`ENGAGEMENT_CANDIDATES` re-ranked by the encoder's
  engagement head for the target event type (:class:`EngagementRerankScorer`);
* ``hir_seq`` — where the run trains SASRec: the same sequence model with its item table started
  from hir's item embeddings, so the pair measures what hir's representation adds to it;
* ``hir_bom`` — Bag-of-Meaning overlap ``Σ_t q_t(u) w_t(i)`` of the partition's token bags, the
  score the BoM index computes.

:func:`headline_scorer` fixes, by rule and before the run, which of them heads a report.
"""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np
import pandas as pd
import torch
from torch import nn

from hir.evaluation.data import (
    bag_vectors,
    encoder_temperature,
    engagement_head,
    read_entity_vectors,
    token_vocabulary,
)
from hir.evaluation.protocols import DAY, Split
from hir.models.baselines.als import ALSScorer
from hir.models.baselines.base import Scorer, last_items
from hir.models.baselines.cooccurrence import CooccurrenceScorer
from hir.models.baselines.lightgcn import LightGCNScorer
from hir.models.baselines.popularity import PopularityScorer
from hir.models.baselines.sasrec import SASRecConfig, SASRecScorer
from hir.models.baselines.text_world_knowledge import TextScorer
from hir.settings import Settings
from hir.storage import Artifacts

ENGAGEMENT_CANDIDATES = 200  # hir_engagement: the candidates the engagement head re-ranks
RECENT_WEIGHTS = (1.0, 0.5, 0.25)  # hir_recent's query: the user's last items, as the co-occurrence baseline weighs them


class EmbeddingScorer(Scorer):
    """``s_ui = <U_u, V_i>`` for given user and item vectors (e.g. hir's entity embeddings).

    Args:
        user_vectors: ``[n_users, d]``; item_vectors: ``[n_items, d]``.
    """

    name = "embedding"

    def __init__(self, user_vectors, item_vectors, name: str | None = None):
        self.user_vectors = torch.as_tensor(np.asarray(user_vectors), dtype=torch.float32)
        self.item_vectors = torch.as_tensor(np.asarray(item_vectors), dtype=torch.float32)
        self.name = name or self.name

    def score(self, users, history):
        return self.user_vectors[torch.as_tensor(users)] @ self.item_vectors.T


class PriorCorrectedScorer(Scorer):
    """Contrastive embeddings ranked for retrieval: ``s_ui = ⟨û_u, v̂_i⟩ / T + log(p_i + 1)``.

    An encoder trained with InfoNCE at temperature ``T`` on L2-normalised vectors ``û, v̂``, with
    negatives drawn in proportion to popularity, learns ``⟨û, v̂⟩ / T ≈ log p(i | u) / p(i) + c(u)``
    (pointwise mutual information), which is blind to how often an item is taken at all. Adding the
    log prior turns it back into ``log p(i | u) + c(u)``, the quantity future-interaction retrieval
    ranks by. ``p_i`` is the item's time-decayed interaction count in the training data
    (:class:`~hir.models.baselines.popularity.PopularityScorer`); the pseudo-count of one keeps unseen items' scores finite, so the
    embedding can still lift a cold item.

    With ``recent_weights`` ``w_1, w_2, ...`` the query is the user's last items instead of its
    snapshot embedding, ``û_u = normalise(Σ_j w_j v̂_{h_j})`` (``h_1`` the most recent, as the
    co-occurrence baseline weighs them): the embedding of a session that moved on after the cut-off.
    A user without history keeps its own embedding.

    Args:
        user_vectors: ``[n_users, d]``; item_vectors: ``[n_items, d]`` (normalised here).
        temperature: ``T`` of the encoder's InfoNCE.
        half_life: popularity decay in the unit of ``Interactions.times``; ``None`` counts events.
        name: the scorer's name in reports.
        recent_weights: weights of the user's most recent items, or ``None`` for the user's embedding.
    """

    name = "prior_corrected"

    def __init__(self, user_vectors, item_vectors, temperature: float, half_life: float | None = None,
                 name: str | None = None, recent_weights=None):
        self.user_vectors = nn.functional.normalize(torch.as_tensor(np.asarray(user_vectors), dtype=torch.float32), dim=1)
        self.item_vectors = nn.functional.normalize(torch.as_tensor(np.asarray(item_vectors), dtype=torch.float32), dim=1)
        self.temperature, self.half_life = temperature, half_life
        self.name = name or self.name
        self.recent_weights = None if recent_weights is None else torch.as_tensor(recent_weights, dtype=torch.float32)
        self.log_prior = torch.zeros(len(self.item_vectors))

    def fit(self, train, validation=None):
        popularity = PopularityScorer(self.half_life).fit(train).item_scores
        self.log_prior = torch.log1p(popularity)
        return self

    def query(self, users, history) -> torch.Tensor:
        """``[len(users), d]`` unit query vectors: the users' embeddings or their recent items'."""
        own = self.user_vectors[torch.as_tensor(users)]
        if self.recent_weights is None:
            return own
        recent = torch.as_tensor(last_items(history, users, len(self.recent_weights))[:, ::-1].copy())
        present = recent >= 0
        pooled = (self.item_vectors[recent.clamp_min(0)] * (self.recent_weights * present)[..., None]).sum(dim=1)
        return torch.where(present.any(dim=1, keepdim=True), nn.functional.normalize(pooled, dim=1), own)

    def score(self, users, history):
        return self.query(users, history) @ self.item_vectors.T / self.temperature + self.log_prior


class EngagementRerankScorer(Scorer):
    """A retrieval scorer's top ``K`` candidates re-ranked by an engagement head.

    The two stages of serving: ``retrieve`` proposes each user's ``K`` best items, and the head
    orders them by ``logit(u, i, r, Δ = 0)``, the probability it gives that the user engages with
    the item as ``edge_type`` now. Every other item keeps the retrieval order, below the candidates,
    so the result is still a full ranking.

    Args:
        retrieve: the first-stage scorer (fitted through this one).
        user_vectors: ``[n_users, d]``; item_vectors: ``[n_items, d]``: the representations the
            head was trained on.
        head: a module ``(u [B, 1, d], v [B, K, d], types [B, 1], ages [B, 1]) → logits [B, K]``
            (:class:`~hir.models.engagement.EngagementHead`).
        edge_type: the engagement type scored (the target event's type id).
        candidates: ``K``.
        name: the scorer's name in reports.
    """

    name = "engagement_rerank"

    def __init__(self, retrieve: Scorer, user_vectors, item_vectors, head: nn.Module, edge_type: int,
                 candidates: int = 200, name: str | None = None):
        self.retrieve, self.head = retrieve, head
        self.user_vectors = torch.as_tensor(np.asarray(user_vectors), dtype=torch.float32)
        self.item_vectors = torch.as_tensor(np.asarray(item_vectors), dtype=torch.float32)
        self.edge_type, self.candidates = edge_type, candidates
        self.name = name or self.name

    def fit(self, train, validation=None):
        self.retrieve.fit(train, validation)
        return self

    def score(self, users, history):
        base = self.retrieve.score(users, history)
        top = base.topk(min(self.candidates, base.shape[1]), dim=1).indices
        u = self.user_vectors[torch.as_tensor(users)].unsqueeze(1)
        type_and_age = torch.full((len(top), 1), self.edge_type), torch.zeros(len(top), 1)
        with torch.no_grad():
            logits = self.head(u, self.item_vectors[top], *type_and_age)
        # Candidates score >= 0, in the head's order; the rest <= -1, in the retrieval order.
        out = base - base.max(dim=1, keepdim=True).values - 1
        return out.scatter_(1, top, logits - logits.min(dim=1, keepdim=True).values)


def embedding_scorer(split: Split, user_keys, user_vectors, item_keys, item_vectors, name: str = "hir") -> Scorer:
    """An :class:`EmbeddingScorer` aligned to ``split``'s indices by source key.

    Args:
        split: the evaluation split (its ``user_keys`` and ``item_keys`` fix the row order).
        user_keys, user_vectors: source keys and ``[n, d]`` vectors of users (e.g. hir's entity
            embeddings of type ``user``); item_keys, item_vectors: likewise for items.
        name: the scorer's name in reports.
    Users or items without a vector score 0.
    """
    def aligned(keys, vectors, wanted):
        vectors = np.asarray(vectors, dtype=np.float32)
        out = np.zeros((len(wanted), vectors.shape[1]), dtype=np.float32)
        where = pd.Index([str(k) for k in keys]).get_indexer([str(k) for k in wanted])
        out[where >= 0] = vectors[where[where >= 0]]
        return out

    return EmbeddingScorer(aligned(user_keys, user_vectors, split.user_keys),
                           aligned(item_keys, item_vectors, split.item_keys), name=name)


def item_text_vectors(texts: list[str | None], settings) -> np.ndarray:
    """``[n_items, d]`` L2-normalised text vectors (``HIR_TEXT_MODEL``); zero rows for items without text."""
    from hir.world_knowledge.embedders import TextEmbedder

    embedder = TextEmbedder(model=settings.text_model, batch_size=settings.text_batch_size, device=settings.embed_device)
    present = [n for n, t in enumerate(texts) if t]
    vectors = embedder.embed([texts[n] for n in present])
    out = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
    out[present] = vectors
    return out


def popularity_half_life(split: Split, settings) -> float | None:
    """Half-life in the unit of the split's times: seconds for dated data, none for order-only data."""
    if split.info.get("protocol") != "temporal":
        return None
    return settings.half_life(split.info["target_events"][0]) * DAY


def bounded(config, seed: int, max_epochs: int | None):
    """A neural scorer's :class:`~hir.models.baselines.neural.TrainConfig` with the run's seed and epoch bound."""
    config.seed = seed
    if max_epochs is not None:
        config.max_epochs = max_epochs
    return config


def sasrec_config(seed: int, max_epochs: int | None):
    """The SASRec configuration of a run: the baseline's and hir_seq's, so the two differ only in
    where their item table starts."""
    config = SASRecConfig()
    config.train = bounded(config.train, seed, max_epochs)
    return config


def baseline_factories(split: Split, settings, seed: int, names: Iterable[str],
                       max_epochs: int | None = None) -> tuple[dict[str, Callable[[], Scorer]], dict[str, str]]:
    """Constructors of the chosen baselines for ``split``, and ``{name: reason}`` for those skipped.

    Args:
        split: the evaluation split; settings: platform settings (threads, text model, half-lives);
        seed: seed of every stochastic baseline; names: baselines to build;
        max_epochs: bound on the neural baselines' epochs (default: their configs).
    """

    def text_scorer() -> Scorer:
        return TextScorer(item_text_vectors(split.item_text, settings))

    available = {
        "popularity": lambda: PopularityScorer(popularity_half_life(split, settings)),
        "cooccurrence": CooccurrenceScorer,
        "als": lambda: ALSScorer(seed=seed, threads=settings.threads),
        "lightgcn": lambda: LightGCNScorer(config=bounded(LightGCNScorer.default_config(), seed, max_epochs)),
        "sasrec": lambda: SASRecScorer(sasrec_config(seed, max_epochs)),
        "text_world_knowledge": text_scorer,
    }
    skipped = {}
    if not split.item_text or not any(split.item_text):
        skipped["text_world_knowledge"] = "the source has no item text"
    factories = {n: available[n] for n in names if n not in skipped}
    return factories, {n: r for n, r in skipped.items() if n in names}


def run_settings(settings, max_epochs: int | None) -> dict:
    """The settings a report must carry to be reproduced."""
    sasrec = SASRecConfig()
    return {
        "threads": settings.threads,
        "text_model": settings.text_model,
        "test_days": settings.test_days,
        "sasrec": {"max_len": sasrec.max_len, "hidden": sasrec.hidden, "layers": sasrec.layers,
                   "heads": sasrec.heads, "dropout": sasrec.dropout, "lr": sasrec.train.lr,
                   "batch_size": sasrec.train.batch_size, "patience": sasrec.train.patience,
                   "max_epochs": max_epochs or sasrec.train.max_epochs, "loss": "full cross-entropy"},
        "lightgcn": {"max_epochs": max_epochs or LightGCNScorer.default_config().max_epochs},
        "als": ALSScorer().params | {"random_state": "seed"},
        "cooccurrence": {"weights": [1.0, 0.5, 0.25], "pairs": "consecutive, directed", "backoff": "popularity"},
    }


def hir_factories(split: Split, artifacts: Artifacts, partition: str, settings: Settings,
                  user_keys: Callable[[np.ndarray], np.ndarray] = lambda k: k,
                  item_keys: Callable[[np.ndarray], np.ndarray] = lambda k: k,
                  sequence_config: Callable | None = None) -> dict[str, Callable]:
    """Constructors of hir's scorers on ``split`` from one partition's artefacts.

    Args:
        split: the evaluation split; artifacts: the data home's artefacts (``entity_embeddings``,
            ``hir_encoder`` and ``bom_tokens`` of ``partition``; ``hir_bom`` is left out without
            tokens); settings: the half-life of the item prior (as the popularity baseline's);
        user_keys, item_keys: map the split's keys to the entities' source keys (identity by default).
        sequence_config: builds the run's :class:`~hir.models.baselines.sasrec.SASRecConfig` (the
            SASRec baseline's, :func:`sasrec_config`) for ``hir_seq``; ``None`` leaves
            ``hir_seq`` out. Its width becomes the embeddings' when they differ.
    """
    item_type = split.info.get("item_type", "product")
    embeddings_path = artifacts.embeddings(partition)
    tokens_path = artifacts.tokens(partition)
    factories = {}
    if embeddings_path.exists():
        u_keys, u_vec = read_entity_vectors(embeddings_path, "user")
        i_keys, i_vec = read_entity_vectors(embeddings_path, item_type)
        # the embeddings in the split's row order (zero rows for users and items without one)
        plain = embedding_scorer(_mapped(split, user_keys, item_keys), u_keys, u_vec, i_keys, i_vec, "hir_no_prior")
        users, items = plain.user_vectors, plain.item_vectors
        temperature = encoder_temperature(artifacts, partition)
        half_life = popularity_half_life(split, settings)

        def corrected(name: str, recent_weights=None) -> Callable[[], PriorCorrectedScorer]:
            return lambda: PriorCorrectedScorer(users, items, temperature, half_life, name, recent_weights)

        factories["hir"] = corrected("hir")
        factories["hir_recent"] = corrected("hir_recent", RECENT_WEIGHTS)
        factories["hir_no_prior"] = lambda: plain
        engagement = engagement_head(artifacts, partition, split)
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
        vocabulary = token_vocabulary(tokens_path)
        if vocabulary:
            u_keys, u_bag = bag_vectors(tokens_path, "user", vocabulary)
            i_keys, i_bag = bag_vectors(tokens_path, item_type, vocabulary)
            factories["hir_bom"] = lambda: embedding_scorer(_mapped(split, user_keys, item_keys), u_keys, u_bag, i_keys, i_bag, "hir_bom")
    return factories


def _mapped(split: Split, user_keys, item_keys) -> Split:
    """A shallow view of ``split`` whose keys are the entities' source keys."""
    return Split(split.train, split.validation, split.test, item_keys(split.item_keys), user_keys(split.user_keys))


def headline_scorer(protocol: dict, hir: dict[str, dict]) -> str:
    """The hir scorer whose figures head a report: ``hir_seq`` on the leave-last-out protocol, whose
    task is the next item of a sequence, when it ran (with the SASRec baseline); ``hir`` otherwise."""
    return "hir_seq" if protocol.get("protocol") == "leave_last_out" and "hir_seq" in hir else "hir"
