"""The scorers of an evaluation, listed in one place: the baselines (:func:`baseline_factories`,
models in :mod:`hir.models.baselines`) and hir's own (:func:`hir_factories`, built from one
partition's artefacts), plus the classes that turn hir's representations into scorers.

hir's scorers on a split:

* ``hir`` — the user's and item's embeddings as of the end of the test queries' history
  (:func:`hir.evaluation.fresh.scoring_embeddings`: the partition's encoder, not retrained, on the
  graph as of then — on leave-last-out that includes each user's validation item, as every
  baseline's history does), cosine over a temperature plus the item's log prior
  (:class:`PriorCorrectedScorer`, the prior the training softmax added); the temperature — how much
  the embedding weighs against the prior — is the encoder's, rescaled to whichever of
  :data:`TEMPERATURE_SCALES` ranks best, with the cut-off embeddings, queries those have not seen
  (:func:`tuning_queries`, :func:`validated_temperature`): on leave-last-out the validation
  queries (their window follows the cut-off), on a temporal split the validation window's target
  events (its own validation items are each user's last ones before the cut-off, inside the
  embeddings' history); the report gives the temperature used;
* ``hir_at_cutoff`` — where those differ, the same encoder's embeddings at the cut-off ``T``: the
  control that shows what the serving-time refresh adds;
* ``hir_recent`` — the same with the user's last items' embeddings as the query;
* ``hir_no_prior`` — the plain dot product (:class:`EmbeddingScorer`), the ablation of the prior;
* ``hir_engagement`` — ``hir``'s top :data:`ENGAGEMENT_CANDIDATES` re-ranked by the encoder's
  engagement head for the target event type (:class:`EngagementRerankScorer`);
* ``hir_bom`` — Bag-of-Meaning overlap ``Σ_t q_t(u) w_t(i)`` of each user's query bag (its
  ``bom_query_probes`` finest item tokens nearest its embedding, :func:`query_bag_scorer`; its own
  bag with ``bom_query_probes`` 0) and the items' own bags (the score the BoM index computes) over
  the bags' temperature, plus the same item log prior (:class:`BagScorer`), the temperature
  validated the same way.

The SASRec family (:data:`SEQUENCE_FAMILY`, :func:`sequence_family`), where the run trains SASRec,
repeated over the run's seeds: ``sasrec`` from its random start; ``hir_seq``, the same model with
its item table started from hir's item embeddings (:func:`hir_item_table`); and its two controls,
the same model at hir_seq's width started from the items' text vectors alone (``sasrec_text``) or
from ALS item factors (``sasrec_als``), so hir_seq's lead over them is what hir's representation
adds beyond its world knowledge and beyond collaborative factors.

:data:`HEADLINE_SCORER` heads every report, by :data:`HEADLINE_RULE`, fixed before any run.
"""

from __future__ import annotations

import copy
import functools
from typing import Callable, Iterable

import numpy as np
import pandas as pd
import torch
from torch import nn

from hir.evaluation.data import (
    bag_temperature,
    bag_vectors,
    encoder_temperature,
    engagement_head,
    read_entity_vectors,
    token_vocabulary,
)
from hir.evaluation.fresh import scoring_embeddings, validation_follows_cutoff
from hir.evaluation.protocols import DAY, Split, run_over_seeds
from hir.models.baselines.als import ALSScorer
from hir.models.baselines.base import Scorer, evaluate, last_items
from hir.models.baselines.cooccurrence import CooccurrenceScorer
from hir.models.baselines.lightgcn import LightGCNScorer
from hir.models.baselines.popularity import PopularityScorer
from hir.models.baselines.sasrec import SASRecConfig, SASRecScorer
from hir.models.baselines.text_world_knowledge import TextScorer
from hir.settings import Settings
from hir.storage import Artifacts
from hir.tokens.bom import load_probe, overlap_temperature

ENGAGEMENT_CANDIDATES = 200  # hir_engagement: the candidates the engagement head re-ranks
RECENT_WEIGHTS = (1.0, 0.5, 0.25)  # hir_recent's query: the user's last items, as the co-occurrence baseline weighs them
SEQUENCE_FAMILY = ("sasrec", "hir_seq", "sasrec_text", "sasrec_als")  # SASRec and its started copies, run over the seeds
# Multiples of a scorer's temperature tried on the validation queries: the weight of the similarity
# against the item prior is the one scoring setting the data decides (Beauty's validation picks
# 0.5 T; the synthetic ecosystem's validation window 1.41 T, where its test window also ranks best).
TEMPERATURE_SCALES = tuple(round(2 ** (k / 2), 4) for k in range(-4, 3))  # 0.25 … 2
UNREACHED = 1e4  # what hir_bom takes off the items a user's tokens do not reach (far below any overlap / τ)
TEMPERATURE_SAMPLE = 512  # users whose cosines against every item fit hir_bom's starting τ
HEADLINE_SCORER = "hir"
HEADLINE_RULE = ("the top-level figures are always hir's own, the user's entity embedding (the hir scorer), "
                 "fixed before any run; every other scorer, hir_seq included, is its own row")


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

    With ``validation_vectors`` and ``validation_queries`` (queries those embeddings have not seen:
    :func:`tuning_queries`) :meth:`fit` rescales ``T`` by :func:`validated_temperature`;
    ``fit_report`` gives the temperature used.

    Args:
        user_vectors: ``[n_users, d]``; item_vectors: ``[n_items, d]`` (normalised here).
        temperature: ``T`` of the encoder's InfoNCE.
        half_life: popularity decay in the unit of ``Interactions.times``; ``None`` counts events.
        name: the scorer's name in reports.
        recent_weights: weights of the user's most recent items, or ``None`` for the user's embedding.
        validation_vectors: ``(user_vectors, item_vectors)`` that score ``validation_queries``;
        validation_queries: the queries ``T`` is chosen on, or ``None`` to keep ``T``.
    """

    name = "prior_corrected"

    def __init__(self, user_vectors, item_vectors, temperature: float, half_life: float | None = None,
                 name: str | None = None, recent_weights=None, validation_vectors=None, validation_queries=None):
        self.user_vectors, self.item_vectors = _unit(user_vectors), _unit(item_vectors)
        self.temperature, self.half_life = temperature, half_life
        self.name = name or self.name
        self.recent_weights = None if recent_weights is None else torch.as_tensor(recent_weights, dtype=torch.float32)
        self.validation_vectors, self.validation_queries = validation_vectors, validation_queries
        self.log_prior = torch.zeros(len(self.item_vectors))
        self.fit_report = {"temperature": temperature}

    def fit(self, train, validation=None):
        popularity = PopularityScorer(self.half_life).fit(train).item_scores
        self.log_prior = torch.log1p(popularity)
        tuning = self.validation_queries
        if self.validation_vectors is not None and tuning is not None and len(tuning.users):
            probe = copy.copy(self)
            probe.user_vectors, probe.item_vectors = (_unit(v) for v in self.validation_vectors)
            self.temperature = validated_temperature(probe, tuning)
            self.fit_report = {"temperature": self.temperature}
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


class BagScorer(Scorer):
    """Bag-of-Meaning retrieval: ``s_ui = Σ_t q_t(u) w_t(i) / τ + log(p_i + 1)``.

    The overlap of unit-norm token bags (:mod:`hir.tokens.bom`: the score the BoM index computes)
    over the bags' temperature ``τ``, plus the same item log prior as :class:`PriorCorrectedScorer`.
    ``τ`` is the one stored with the bags (fitted to the embedding's scale). As in the index
    (:meth:`hir.models.index.InvertedIndex.search`), only the items a user's tokens reach are
    candidates: the others rank below every one of them (by prior), where a popular item the tokens
    miss would otherwise outrank the far end of the candidates.

    With ``validation_queries`` (queries the ``validation_bags`` have not seen: :func:`tuning_queries`)
    :meth:`fit` rescales ``τ`` on them as :class:`PriorCorrectedScorer` does
    (:func:`validated_temperature`); ``fit_report`` gives the temperature used.

    Args:
        user_bags: ``[n_users, T]`` scipy CSR; item_bags: ``[n_items, T]`` (empty rows where none).
        temperature: ``τ``. half_life: popularity decay as for :class:`PriorCorrectedScorer`.
        name: the scorer's name in reports. validation_queries: the queries ``τ`` is chosen on, or ``None``.
        validation_bags: the user bags that score ``validation_queries`` (``user_bags`` when ``None``:
            bags made at the cut-off).
    """

    name = "bag"

    def __init__(self, user_bags, item_bags, temperature: float, half_life: float | None = None, name: str | None = None,
                 validation_queries=None, validation_bags=None):
        self.user_bags, self.item_bags_t = user_bags.tocsr(), item_bags.T.tocsc()
        self.temperature, self.half_life, self.validation_queries = temperature, half_life, validation_queries
        self.validation_bags = validation_bags
        self.name = name or self.name
        self.log_prior = torch.zeros(item_bags.shape[0])
        self.fit_report = {"temperature": temperature}

    def fit(self, train, validation=None):
        self.log_prior = torch.log1p(PopularityScorer(self.half_life).fit(train).item_scores)
        if self.validation_queries is not None and len(self.validation_queries.users):
            probe = copy.copy(self)
            if self.validation_bags is not None:
                probe.user_bags = self.validation_bags.tocsr()
            self.temperature = validated_temperature(probe, self.validation_queries)
            self.fit_report = {"temperature": self.temperature}
        return self

    def score(self, users, history):
        overlap = torch.from_numpy((self.user_bags[np.asarray(users)] @ self.item_bags_t).toarray().astype(np.float32))
        return torch.where(overlap > 0, overlap / self.temperature + self.log_prior, self.log_prior - UNREACHED)


def tuning_queries(split: Split):
    """The queries hir's scorers choose their temperature on, scored with the cut-off embeddings
    (which have seen none of them): the validation window's on a temporal split
    (``Split.window_validation``), the validation queries where they follow the cut-off
    (leave-last-out), else ``None`` (the encoder's temperature stays)."""
    if split.window_validation is not None and len(split.window_validation.users):
        return split.window_validation
    return split.validation if validation_follows_cutoff(split) else None


def validated_temperature(scorer: Scorer, validation) -> float:
    """The temperature among ``scorer.temperature × TEMPERATURE_SCALES`` under which ``scorer``
    ranks the ``validation`` queries best (NDCG@10; on a tie, the scale nearest 1).

    ``scorer`` must score ``similarity / scorer.temperature + prior`` and be fitted on the
    validation queries' history; it is left as it was.
    """
    base = scorer.temperature
    ndcg = {}
    for scale in TEMPERATURE_SCALES:
        scorer.temperature = base * scale
        ndcg[scale] = evaluate(scorer, validation, (10,))["ndcg@10"]
    scorer.temperature = base
    return base * max(TEMPERATURE_SCALES, key=lambda scale: (ndcg[scale], -abs(np.log(scale))))


def _unit(vectors) -> torch.Tensor:
    return nn.functional.normalize(torch.as_tensor(np.asarray(vectors), dtype=torch.float32), dim=1)


def aligned_bags(keys, bags, wanted):
    """``[len(wanted), T]`` CSR: the bag row whose key in ``keys`` is each wanted key, empty where none is."""
    import scipy.sparse as sp

    where = pd.Index([str(k) for k in keys]).get_indexer([str(k) for k in wanted])
    return sp.diags((where >= 0).astype(np.float32)) @ bags[np.maximum(where, 0)] if len(keys) else \
        sp.csr_matrix((len(wanted), bags.shape[1]), dtype=np.float32)


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

    @property
    def fit_report(self) -> dict:
        """What fitting the retrieval stage chose (its temperature)."""
        return getattr(self.retrieve, "fit_report", {})

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
    return EmbeddingScorer(aligned_rows(user_keys, user_vectors, split.user_keys),
                           aligned_rows(item_keys, item_vectors, split.item_keys), name=name)


def aligned_rows(keys, vectors, wanted) -> np.ndarray:
    """``[len(wanted), d]``: the row of ``vectors`` whose key in ``keys`` is each wanted key, zeros where none is."""
    vectors = np.asarray(vectors, dtype=np.float32)
    out = np.zeros((len(wanted), vectors.shape[1]), dtype=np.float32)
    where = pd.Index([str(k) for k in keys]).get_indexer([str(k) for k in wanted])
    out[where >= 0] = vectors[where[where >= 0]]
    return out


def item_text_vectors(texts: list[str | None], settings) -> np.ndarray:
    """``[n_items, d]`` L2-normalised text vectors (``HIR_TEXT_MODEL``); zero rows for items without text."""
    from hir.world_knowledge.embedders import TextEmbedder

    embedder = TextEmbedder(model=settings.text_model, batch_size=settings.text_batch_size, device=settings.embed_device)
    present = [n for n, t in enumerate(texts) if t]
    vectors = embedder.embed([texts[n] for n in present])
    out = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
    out[present] = vectors
    return out


def split_text_vectors(split: Split, settings) -> Callable[[], np.ndarray] | None:
    """The split's :func:`item_text_vectors`, embedded on the first call and kept (the
    ``text_world_knowledge`` baseline and ``sasrec_text`` share them); ``None`` without item text."""
    if not split.item_text or not any(split.item_text):
        return None
    return functools.cache(lambda: item_text_vectors(split.item_text, settings))


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


def sasrec_config(seed: int, max_epochs: int | None, hidden: int | None = None):
    """The SASRec configuration of a run, every member of :data:`SEQUENCE_FAMILY`'s, so they differ
    only in where their item table starts (and, for a started one, its width ``hidden``)."""
    config = SASRecConfig()
    config.train = bounded(config.train, seed, max_epochs)
    if hidden is not None:
        config.hidden = hidden
    return config


def baseline_factories(split: Split, settings, seed: int, names: Iterable[str], max_epochs: int | None = None,
                       text: Callable[[], np.ndarray] | None = None) -> tuple[dict[str, Callable[[], Scorer]], dict[str, str]]:
    """Constructors of the chosen baselines for ``split``, and ``{name: reason}`` for those skipped.

    ``sasrec`` is not among them: it runs with its family, over the run's seeds (:func:`sequence_family`).

    Args:
        split: the evaluation split; settings: platform settings (threads, text model, half-lives);
        seed: seed of every stochastic baseline; names: baselines to build;
        max_epochs: bound on the neural baselines' epochs (default: their configs);
        text: the items' text vectors (:func:`split_text_vectors`, its default).
    """
    text = text or split_text_vectors(split, settings)
    available = {
        "popularity": lambda: PopularityScorer(popularity_half_life(split, settings)),
        "cooccurrence": CooccurrenceScorer,
        "als": lambda: ALSScorer(seed=seed, threads=settings.threads),
        "lightgcn": lambda: LightGCNScorer(config=bounded(LightGCNScorer.default_config(), seed, max_epochs)),
        "text_world_knowledge": lambda: TextScorer(text()),
    }
    skipped = {}
    if text is None:
        skipped["text_world_knowledge"] = "the source has no item text"
    factories = {n: available[n] for n in names if n not in skipped}
    return factories, {n: r for n, r in skipped.items() if n in names}


def seeds_of(seed: int, count: int) -> list[int]:
    """The seeds a run repeats :data:`SEQUENCE_FAMILY` over: ``seed, seed + 1, …`` (``count`` of them)."""
    return list(range(seed, seed + max(1, count)))


def hir_item_table(split: Split, artifacts: Artifacts, partition: str,
                   item_keys: Callable[[np.ndarray], np.ndarray] = lambda k: k) -> np.ndarray | None:
    """hir's item embeddings of ``partition`` at its cut-off in ``split``'s row order (zero rows for
    items without one), ``hir_seq``'s start; ``None`` without entity embeddings. ``item_keys`` maps
    the split's keys to the entities' source keys.

    The cut-off's embeddings, not the serving-time ones ``hir`` scores with: like the other starts
    and every model's parameters, they saw nothing past the cut-off (on leave-last-out, exactly the
    training part)."""
    path = artifacts.embeddings(partition)
    if not path.exists():
        return None
    items = aligned_vectors(_mapped(split, lambda k: k, item_keys), path, split.info.get("item_type", "product"))[1]
    return items.numpy()


def text_start(vectors: np.ndarray, width: int) -> np.ndarray:
    """Text vectors as a ``width``-wide item table: unchanged at that width, else their coordinates
    on the ``width`` leading principal directions of the items with text (zero-padded where there
    are fewer); items without text keep zero rows."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.shape[1] == width:
        return vectors
    present = np.linalg.norm(vectors, axis=1) > 0
    centred = vectors[present] - vectors[present].mean(axis=0)
    directions = np.linalg.svd(centred, full_matrices=False)[2][:width]
    out = np.zeros((len(vectors), width), dtype=np.float32)
    out[present, : len(directions)] = centred @ directions.T
    return out


def als_start(split: Split, settings, seed: int, width: int) -> np.ndarray:
    """ALS item factors as a ``width``-wide item table: the ALS baseline's configuration with
    ``width`` factors and ``seed``; items without a training interaction keep zero rows."""
    factors = ALSScorer(factors=width, seed=seed, threads=settings.threads).fit(split.train).item_factors.numpy()
    return np.where((np.bincount(split.train.items, minlength=split.train.n_items) > 0)[:, None], factors, 0.0)


def sequence_family(split: Split, settings, seed: int, max_epochs: int | None, hir_items: np.ndarray | None = None,
                    text: Callable[[], np.ndarray] | None = None
                    ) -> tuple[Callable[[int], dict[str, Callable[[], Scorer]]], dict[str, str]]:
    """The SASRec family of a run (:data:`SEQUENCE_FAMILY`) as ``seed → constructors``, and
    ``{name: reason}`` for members left out.

    Every member is :class:`~hir.models.baselines.sasrec.SASRecScorer` with :func:`sasrec_config`
    at the given seed: ``sasrec`` from its random start; with ``hir_items``, ``hir_seq`` started
    from them and, at their width, ``sasrec_text`` started from :func:`text_start` of ``text``
    and ``sasrec_als`` from :func:`als_start` (fitted once, with the run's ``seed``). Each start
    goes through the same ``item_init`` (unit rows; items without a vector keep the seeded random
    start), so the members differ only in where their items start.

    Args:
        split: the evaluation split; settings: threads; seed: the run's seed (the ALS start's);
        max_epochs: bound on the epochs; hir_items: :func:`hir_item_table`, or ``None`` (no
        hir_seq, no controls); text: the items' text vectors, the ``text_world_knowledge``
        baseline's (``None``: no ``sasrec_text``).
    """
    starts, skipped = {}, {}
    if hir_items is not None:
        width = hir_items.shape[1]
        starts = {"hir_seq": hir_items, "sasrec_als": als_start(split, settings, seed, width)}
        if text is None:
            skipped["sasrec_text"] = "the source has no item text"
        else:
            starts["sasrec_text"] = text_start(text(), width)

    def factories(run_seed: int) -> dict[str, Callable[[], Scorer]]:
        started = {n: functools.partial(seeded_sasrec, run_seed, max_epochs, starts[n], n)
                   for n in SEQUENCE_FAMILY if n in starts}
        return {"sasrec": functools.partial(seeded_sasrec, run_seed, max_epochs)} | started

    return factories, skipped


def run_sequence_family(split: Split, settings, seeds: list[int], max_epochs: int | None, ks: Iterable[int],
                        hir_items: np.ndarray | None = None, text: Callable[[], np.ndarray] | None = None,
                        progress: Callable[[str], None] = lambda _: None,
                        per_query: dict | None = None) -> tuple[dict, dict, dict[str, str]]:
    """Fit and evaluate :func:`sequence_family` (its ALS start at ``seeds[0]``, the run's seed) at
    each of ``seeds`` (:func:`~hir.evaluation.protocols.run_over_seeds`, which fills ``per_query``):
    ``hir_seq``'s row (a hir scorer), the other members' rows (baselines) and ``{name: reason}``
    for members left out."""
    family_at, skipped = sequence_family(split, settings, seeds[0], max_epochs, hir_items, text)
    rows = run_over_seeds(split, family_at, seeds, ks, progress, per_query)
    return {n: rows.pop(n) for n in ("hir_seq",) if n in rows}, rows, skipped


def seeded_sasrec(seed: int, max_epochs: int | None, start: np.ndarray | None = None, name: str = "sasrec") -> SASRecScorer:
    """SASRec of the run's configuration at ``seed``, its item table started from ``start`` (at its
    width) or, without one, from the random start."""
    width = None if start is None else start.shape[1]
    return SASRecScorer(sasrec_config(seed, max_epochs, width), item_init=start, name=name)


def compared_pairs(hir: dict, baselines: dict) -> dict[str, tuple[str, str]]:
    """The paired comparisons a report carries: the headline scorer against every baseline, and
    ``hir_seq`` against each other member of its family (:data:`SEQUENCE_FAMILY`)."""
    pairs = {f"{HEADLINE_SCORER}_minus_{b}": (HEADLINE_SCORER, b) for b in baselines} if HEADLINE_SCORER in hir else {}
    if "hir_seq" in hir:
        pairs |= {f"hir_seq_minus_{b}": ("hir_seq", b) for b in SEQUENCE_FAMILY if b != "hir_seq" and b in baselines}
    return pairs


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
        "sequence_starts": {"hir_seq": "hir's item embeddings",
                            "sasrec_text": "text_world_knowledge's vectors on their leading principal directions, at hir_seq's width",
                            "sasrec_als": "ALS item factors (the als configuration, the run's seed) at hir_seq's width",
                            "item_init": "unit rows; items without a vector keep the seeded random start"},
    }


def hir_factories(split: Split, artifacts: Artifacts, partition: str, settings: Settings,
                  user_keys: Callable[[np.ndarray], np.ndarray] = lambda k: k,
                  item_keys: Callable[[np.ndarray], np.ndarray] = lambda k: k) -> dict[str, Callable]:
    """Constructors of hir's scorers on ``split`` from one partition's artefacts (``hir_seq`` is
    built with its controls by :func:`sequence_family`).

    Args:
        split: the evaluation split; artifacts: the data home's artefacts (``entity_embeddings``,
            ``hir_encoder`` and ``bom_tokens`` of ``partition``; ``hir_bom`` is left out without
            tokens); settings: the half-life of the item prior (as the popularity baseline's);
        user_keys, item_keys: map the split's keys to the entities' source keys (identity by default).
    """
    item_type = split.info.get("item_type", "product")
    embeddings_path = artifacts.embeddings(partition)
    tokens_path = artifacts.tokens(partition)
    factories = {}
    if embeddings_path.exists():
        mapped = _mapped(split, user_keys, item_keys)
        temperature = encoder_temperature(artifacts, partition)
        half_life = popularity_half_life(split, settings)
        serving = scoring_embeddings(split, artifacts, partition, settings)
        # the embeddings in the split's row order (zero rows for users and items without one)
        at_cutoff = aligned_vectors(mapped, embeddings_path, item_type)
        tuning = tuning_queries(split)  # scored with the cut-off embeddings, which have not seen them
        if serving != embeddings_path:  # the control: the same encoder's embeddings as of the cut-off
            factories["hir_at_cutoff"] = lambda: PriorCorrectedScorer(*at_cutoff, temperature, half_life, "hir_at_cutoff",
                                                                      validation_vectors=at_cutoff, validation_queries=tuning)
        users, items = aligned_vectors(mapped, serving, item_type)
        plain = EmbeddingScorer(users, items, name="hir_no_prior")

        def corrected(name: str, recent_weights=None) -> Callable[[], PriorCorrectedScorer]:
            return lambda: PriorCorrectedScorer(users, items, temperature, half_life, name, recent_weights, at_cutoff, tuning)

        factories["hir"] = corrected("hir")
        factories["hir_recent"] = corrected("hir_recent", RECENT_WEIGHTS)
        factories["hir_no_prior"] = lambda: plain
        engagement = engagement_head(artifacts, partition, split)
        if engagement is not None:
            factories["hir_engagement"] = lambda: EngagementRerankScorer(
                factories["hir"](), users, items, *engagement, candidates=ENGAGEMENT_CANDIDATES, name="hir_engagement")
    if tokens_path.exists():
        vocabulary = token_vocabulary(tokens_path)
        if vocabulary:
            mapped = _mapped(split, user_keys, item_keys)
            i_keys, i_bag = bag_vectors(tokens_path, item_type, vocabulary)
            item_bags = aligned_bags(i_keys, i_bag, mapped.item_keys)
            probe = load_probe(artifacts.quantizer_dir(partition)) if settings.bom_query_probes > 0 else None
            if probe is not None and embeddings_path.exists():
                factories["hir_bom"] = lambda: query_bag_scorer(probe, vocabulary, item_bags, users, items, at_cutoff[0],
                                                                temperature, split, settings)
            else:
                u_keys, u_bag = bag_vectors(tokens_path, "user", vocabulary)
                factories["hir_bom"] = lambda: BagScorer(aligned_bags(u_keys, u_bag, mapped.user_keys), item_bags,
                                                         bag_temperature(tokens_path), popularity_half_life(split, settings),
                                                         "hir_bom", validation_queries=tuning_queries(split))
    return factories


def query_bag_scorer(probe, vocabulary: dict[int, int], item_bags, users, items, cutoff_users, temperature: float,
                     split: Split, settings: Settings) -> BagScorer:
    """``hir_bom`` with query bags: each user's ``bom_query_probes`` finest item tokens nearest its
    embedding (:func:`hir.tokens.bom.query_bags`, made from the serving embeddings as ``hir retrieve``
    makes them; the cut-off embeddings' bags choose ``τ``), against the items' own bags.

    ``τ`` starts at :func:`hir.tokens.bom.overlap_temperature` (the overlap put on the cosine's
    scale over :data:`TEMPERATURE_SAMPLE` users and every item, cut-off embeddings and bags) and is
    then validated as every hir scorer's is.
    """
    item_type, columns = split.info.get("item_type", "product"), np.fromiter(vocabulary, np.int64, len(vocabulary))

    def bags(vectors):
        return probe.matrix(np.asarray(vectors), "user", item_type, settings.bom_query_probes, columns)

    serving, at_cutoff = bags(users), bags(cutoff_users)
    sample = np.random.default_rng(0).permutation(len(users))[:TEMPERATURE_SAMPLE]
    cos = (_unit(np.asarray(cutoff_users)[sample]) @ _unit(items).T).numpy()
    start = overlap_temperature(cos, (at_cutoff[sample] @ item_bags.T).toarray(), temperature)
    return BagScorer(serving, item_bags, start, popularity_half_life(split, settings), "hir_bom",
                     validation_queries=tuning_queries(split), validation_bags=at_cutoff)


def aligned_vectors(mapped: Split, path, item_type: str) -> tuple[torch.Tensor, torch.Tensor]:
    """User and item vectors of an ``embeddings.parquet`` in ``mapped``'s row order (zero rows for
    those without one); ``mapped``'s keys are the entities' source keys (:func:`_mapped`)."""
    u_keys, u_vec = read_entity_vectors(path, "user")
    i_keys, i_vec = read_entity_vectors(path, item_type)
    plain = embedding_scorer(mapped, u_keys, u_vec, i_keys, i_vec)
    return plain.user_vectors, plain.item_vectors


def _mapped(split: Split, user_keys, item_keys) -> Split:
    """A shallow view of ``split`` whose keys are the entities' source keys."""
    return Split(split.train, split.validation, split.test, item_keys(split.item_keys), user_keys(split.user_keys))
