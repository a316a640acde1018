"""The HIR model and its training configuration (DESIGN §7): encoder, projection head, two-level
prototypes and engagement head, sized for a snapshot by :func:`encoder_config_for`.

:class:`WorldKnowledge` hands the model each view token's world-knowledge vector. Modules and
configs only: checkpoints are :mod:`hir.models.checkpoint`, training :mod:`hir.models.trainer`,
inference :mod:`hir.models.inference`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
from hir.models.encoder import EncoderConfig, HIREncoder, gather_wk
from hir.models.engagement import EngagementHead, engagement_loss
from hir.models.examples import DEFAULT_FUNNEL_WEIGHTS
from hir.models.graph import TemporalGraph
from hir.models.losses import Prototypes


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines a training run (with the encoder and sampler configs)."""

    steps: int = 300  # optimiser steps of a run from scratch (0: ``epochs`` passes over the examples)
    epochs: float = 1.0  # with ``steps = 0``: steps = ⌈epochs · CausalExamples.pass_size() / batch_size⌉ (a view counts by its weight)
    # at most this many learning-rate cycles, the first of ``steps`` steps and each next twice as long as
    # the one before, each with its own cosine decay (warm restarts); a cycle that predicts held-out next
    # engagements within one standard error of the best is kept, training stopping at the first below that
    cycles: int = 1
    holdout_users: int = 2000  # users (at most a tenth of them) whose newest first-contact engagement (click or deeper) chooses the cycle (cycles > 1)
    batch_size: int = 64  # causal examples per step and process (anchors = 2 × batch_size + pool_size)
    lr: float = 5e-3  # peak AdamW learning rate
    id_lr_scale: float = 1.0  # the hashed-id table's learning rate as a multiple of ``lr`` (its rows are seldom touched)
    weight_decay: float = 0.04  # AdamW weight decay on matrices (not on norms, biases, prototypes)
    warmup_steps: int = 20  # linear learning-rate warm-up
    min_lr_ratio: float = 0.1  # cosine decay floor as a share of ``lr``
    ema_start: float = 0.9  # teacher momentum m₀ at step 0, rising to ``ema_end``
    ema_end: float = 1.0
    coarse: int = 8  # K₁ coarse prototypes
    fine: int = 48  # K₂ fine prototypes
    proj_dim: int = 64  # projection width in which prototypes live
    student_temperature: float = 0.1  # τ of the student's softmax
    sinkhorn_eps: float = 0.05  # ε of the Sinkhorn-Knopp targets
    sinkhorn_iters: int = 3
    standardize_scores: bool = True  # z-score teacher scores per prototype before Sinkhorn-Knopp
    narrow_views: int = 2  # narrow (student) views per anchor
    teacher_batch: int = 64  # examples per step whose user and positive get teacher targets (prototype losses)
    w_proto: float = 1.0  # weight of the prototype cross-entropy
    w_pair: float = 1.0  # weight of the cross-entity term: u's student predicts v's teacher target
    w_hier: float = 0.5  # weight of the hierarchy consistency
    w_eng: float = 1.0  # weight of the engagement loss
    w_nce: float = 0.0  # weight of the InfoNCE between the student representations of u and v
    nce_temperature: float = 0.1  # T of that InfoNCE and of the next-engagement softmax (and of scoring)
    w_next: float = 1.0  # weight of the next-engagement sampled softmax (user → what it engages with next)
    target_types: str = "product,ad,movie,item"  # comma-separated node types of the positives (those in the graph)
    funnel_weights: str = ",".join(f"{k}:{v:g}" for k, v in DEFAULT_FUNNEL_WEIGHTS.items())  # event type:weight
    pool_size: int = 896  # M shared popularity-drawn candidates per step (negatives = B − 1 + M)
    item_residual: bool = False  # add a learnt vector of its own to each item that is a training positive (:class:`ItemResidual`)
    residual_rows: int = 0  # rows of that table (set by the trainer: the items it trains on)
    residual_lr_scale: float = 1.0  # that table's learning rate as a multiple of ``lr`` (a row learns only when its item is a candidate)
    item_context: bool = False  # a second learnt vector of each trained item, pooled only by the users that engaged with it (:meth:`HIRModel.pooled_ids`)
    pool_alpha: float = 0.75  # popularity exponent α of that pool
    # probability that an example's user and positive lose their own earlier edges to each other in
    # the student views (the view of the item the user then buys), so the task is the user's interests,
    # not a copy of the edge it already has
    pair_dropout: float = 0.0
    prior_half_life_days: float = 0.0  # half-life of the log prior added to the logits (0: undecayed counts)
    grad_share_every: int = 50  # steps between measurements of each loss's share of the gradient norm (0: never)
    grad_clip: float = 1.0  # max gradient norm
    checkpoint_every: int = 100  # steps between checkpoints (and one at the end)
    log_every: int = 10  # steps between metric records
    seed: int = 0
    backend: str = "dense"  # attention backend while training: dense (CPU) or flex (GPU)
    warm_start: str = ""  # checkpoint folder to start from (weights and prototypes), "" for scratch
    finetune_steps: int = 50  # steps of a warm-started run
    finetune_lr: float = 2e-3  # peak learning rate of a warm-started run

    @property
    def cycle_steps(self) -> int:
        """Steps of the first learning-rate cycle (a warm-started run has one, of ``finetune_steps``)."""
        return self.finetune_steps if self.warm_start else self.steps

    @property
    def total_cycles(self) -> int:
        return 1 if self.warm_start else max(1, self.cycles)

    @property
    def cycle_ends(self) -> list[int]:
        """The step at which each cycle ends: cycle ``k`` (from 0) lasts ``cycle_steps · 2^k`` steps,
        so a cycle trains as long as all before it together (SGDR's doubling)."""
        return [self.cycle_steps * (2 ** (k + 1) - 1) for k in range(self.total_cycles)]

    @property
    def total_steps(self) -> int:
        return self.cycle_ends[-1]


# The recency pooling's two scalars are learnt in log space times this gain, so that the optimiser's
# step moves them RECENCY_GAIN times faster than a weight: how much a user's newest entries matter is
# a property of the data (Amazon Beauty's next purchase follows the last one; the synthetic
# ecosystem's users draw each engagement from one of several interests), and it has to move by an
# order of magnitude within one pass.
RECENCY_GAIN = 10.0


class ItemResidual(nn.Module):
    """A learnt vector ``r_i`` of each item the model was trained to predict, added to its representation.

    ``h_i ← h_i + r_i`` for the ``R`` items listed (warehouse entity ids, sorted), ``h_i`` unchanged
    for any other entity: ``r_i`` starts at zero and learns wherever item ``i`` is embedded in a step
    (a positive, an in-batch or pool negative), so it gives each trained item the freedom of a free
    item vector (SASRec's, matrix factorisation's)
    beside what the encoder infers from its neighbourhood, while an item first seen later keeps the
    inductive representation alone.

    Args:
        rows: ``R``, the items with a vector.
        dim: the representation width.
    """

    def __init__(self, rows: int, dim: int):
        super().__init__()
        self.register_buffer("entity_ids", torch.full((rows,), torch.iinfo(torch.int64).max, dtype=torch.int64))
        self.weight = nn.Parameter(torch.zeros(rows, dim))

    def set_items(self, entity_ids: torch.Tensor) -> None:
        """List the ``R`` items (int64 entity ids, distinct) whose vectors the table holds."""
        if entity_ids.numel() != self.entity_ids.numel():
            raise ValueError(f"{entity_ids.numel()} items for a table of {self.entity_ids.numel()} rows")
        self.entity_ids.copy_(entity_ids.sort().values)

    def forward(self, entity_id: torch.Tensor) -> torch.Tensor:
        """``[B, dim]`` ``r`` of each of ``entity_id`` ``[B]`` (zero where the table has none)."""
        row = torch.searchsorted(self.entity_ids, entity_id.contiguous()).clamp_max(self.entity_ids.numel() - 1)
        hit = self.entity_ids[row] == entity_id
        return self.weight[row] * hit.unsqueeze(-1).to(self.weight.dtype)


class HIRModel(nn.Module):
    """Encoder, projection head, two-level prototypes and engagement head.

    The representation is ``h = enc(view) + LN(W_c · pooled wk) + LN(pooled ids)``: with world
    knowledge its pooled content (:meth:`pooled_content`), and with ``encoder_config.pooled_ids``
    the pooled hashed ids (:meth:`pooled_ids`) reach ``h`` directly instead of only through attention,
    and with ``config.item_residual`` each trained item adds its own vector (:class:`ItemResidual`).

    Args:
        encoder_config: the encoder's configuration (its ``dim`` is the representation width).
        config: the training configuration (prototype counts, projection width).
        num_edge_types: engagement types known to the engagement head.
    """

    def __init__(self, encoder_config: EncoderConfig, config: TrainConfig, num_edge_types: int):
        super().__init__()
        dim = encoder_config.dim
        self.encoder = HIREncoder(encoder_config)
        self.projector = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, config.proj_dim))
        self.prototypes = Prototypes(config.proj_dim, config.coarse, config.fine)
        self.engagement = EngagementHead(dim, num_edge_types, hidden=dim)
        self.content = nn.Sequential(nn.Linear(encoder_config.wk_dim, dim), nn.LayerNorm(dim)) if encoder_config.wk_dim else None
        self.id_norm = nn.LayerNorm(dim) if encoder_config.pooled_ids else None
        if self.id_norm is not None and encoder_config.wk_dim:  # beside world knowledge the ids start silent
            nn.init.zeros_(self.id_norm.weight)
        self.residual = ItemResidual(config.residual_rows, dim) if config.item_residual and config.residual_rows else None
        self.context = ItemResidual(config.residual_rows, dim) if config.item_context and config.residual_rows else None
        c = encoder_config
        learnt = c.recency_weight > 0 and c.recency_type >= 0
        self.log_recency = nn.Parameter(torch.tensor([math.log(c.recency_weight), math.log(c.recency_half_rank)]) / RECENCY_GAIN) if learnt else None

    def item_tables(self) -> list[ItemResidual]:
        """The per-item tables the model has (residuals, context), each over the trained items."""
        return [t for t in (self.residual, self.context) if t is not None]

    def recency(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(ρ, h)`` of the users' recency pooling (:func:`pooling_weights`), learnt from the
        config's start as ``exp(G θ)`` with ``G =`` :data:`RECENCY_GAIN`; ``None`` when off."""
        if self.log_recency is None:
            return None
        rho, half_rank = torch.exp(RECENCY_GAIN * self.log_recency)
        return rho, half_rank

    def pooled_ids(self, view) -> torch.Tensor:
        """``LN(Σ_s a_s E_id(s) / Σ_s a_s)`` ``[B, dim]``: the hashed ids (the encoder's
        :meth:`~hir.models.encoder.NodeEncoder.hashed_id` table) of the view's tokens, pooled with
        the weights ``a_s`` of :func:`pooling_weights`.

        An item's vector is then its own id beside its neighbours', and a user's the ids of what it
        engaged with (with the config's ``pool_direct``; its own id beside them without): the tied
        item-id term of item-based collaborative filtering, on the same table the tokens use. Through
        attention alone a rare entity's id, a sliver of a token beside its type, position, edge and
        metadata embeddings, barely reached ``h``; on a log of bare ids (Taobao) the representation
        then ranked no better than popularity.

        With ``config.item_context`` a user's hop-1 tokens add a second vector ``c_j`` of each trained
        item (an :class:`ItemResidual` table of their own) to its id, ``E_id(j) + c_j``, which the item
        never uses for itself: ``⟨c_j, h_i⟩`` is then free to score "``i`` follows ``j``" apart from
        "``j`` follows ``i``" (the two item tables of FISM and FPMC), where the tied id scores both alike.
        """
        weight = pooling_weights(view, self.encoder.config, self.recency())
        ids = self.encoder.node.hashed_id(view.entity_id)
        if self.context is not None:
            engaged = (view.node_type[:, :1] == self.encoder.config.recency_type) & (view.hop == 1)
            ids = ids + self.context(view.entity_id) * engaged.unsqueeze(-1).to(ids.dtype)
        return self.id_norm((weight.unsqueeze(-1) * ids).sum(1) / weight.sum(1, keepdim=True).clamp_min(1e-6))

    def pooled_content(self, view, wk: tuple) -> torch.Tensor:
        """``LN(W_c · Σ_s a_s wk_s / Σ_s a_s)`` ``[B, dim]``: the view's world knowledge pooled with
        the weights of :func:`pooling_weights` where a token has any, so a node without content (a
        user) is described by the content of what it engaged with, most of all of its newest."""
        vectors, has = wk
        weight = has.float() * pooling_weights(view, self.encoder.config, self.recency())
        pooled = (weight.unsqueeze(-1) * vectors).sum(1) / weight.sum(1, keepdim=True).clamp_min(1e-6)
        return self.content(pooled)

    def embed(self, view, wk: tuple | None, backend: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Representation ``h`` ``[B, dim]`` and prototype scores ``([B, K₁], [B, K₂])`` of a view.

        ``wk`` is ``(vectors [B, S, d], has [B, S])`` from :meth:`WorldKnowledge.per_token` or ``None``.
        """
        h = self.encoder(view, wk=wk[0] if wk else None, backend=backend, has_wk=wk[1] if wk else None)
        if wk is not None and self.content is not None:
            h = h + self.pooled_content(view, wk)
        if self.id_norm is not None:
            h = h + self.pooled_ids(view)
        if self.residual is not None:
            h = h + self.residual(view.entity_id[:, 0])
        coarse, fine = self.prototypes.scores(self.projector(h))
        return h, coarse, fine

    def forward(self, views: list, wks: list, backend: str, pairs: dict[str, torch.Tensor]):
        """Student pass over narrow views and the engagement loss on the first view.

        Args:
            views, wks: narrow views and their per-token world knowledge (or ``None``).
            backend: attention backend.
            pairs: ``u, v, pop`` row indices into the view batch, ``perm`` the in-batch
                permutation, ``edge_type`` and ``age`` (days) of the positive edges.

        Returns:
            ``(outputs, engagement loss, positive logits, negative logits)`` where ``outputs`` is
            one ``(h, coarse scores, fine scores)`` per view.
        """
        outputs = [self.embed(view, wk, backend) for view, wk in zip(views, wks)]
        h = outputs[0][0]
        v = h[pairs["v"]]
        loss, pos, neg = engagement_loss(
            self.engagement, h[pairs["u"]], v, [h[pairs["pop"]], v[pairs["perm"]]],
            pairs["edge_type"], pairs["age"],
        )
        return outputs, loss, pos, neg


def recency_entries(view, edge_types: list[int]) -> torch.Tensor:
    """``[B, S]`` bool: the hop-1 tokens brought in by an edge of one of ``edge_types`` (any type
    when empty)."""
    entries = (view.hop == 1) & ~view.pad
    if edge_types:
        entries &= torch.isin(view.edge_type, torch.tensor(edge_types, device=view.edge_type.device))
    return entries


def recency_ranks(view, entries: torch.Tensor) -> torch.Tensor:
    """``[B, S]`` int64: each of the view's ``entries`` (a mask from :func:`recency_entries`) ranked
    by recency (0 for the newest, by ``edge_dt``; ties in view order, which lists an anchor's newest
    entries first); the other tokens rank after them."""
    age = torch.where(entries, view.edge_dt.double(), torch.inf)
    order = age.argsort(dim=1, stable=True)
    return torch.empty_like(order).scatter_(1, order, torch.arange(order.shape[1], device=order.device).expand_as(order))


def pooling_weights(view, config: EncoderConfig, recency: tuple | None = None) -> torch.Tensor:
    """``[B, S]`` weights ``a_s`` of the pooled content and ids of a view:

    ``a_s = [s not padding] · (p_s + [hop_s = 0] + ρ · [anchor of type c] · [s an entry] · 2^(−r_s/h))``

    with ``p`` the random-walk landing probability from the anchor, an entry a hop-1 token brought
    in by an edge of the config's ``recency_edge_types`` (:func:`recency_entries`), ``r_s`` its
    rank by recency (:func:`recency_ranks`), ``c`` the config's ``recency_type`` and
    ``recency = (ρ, h)`` (scalars or 0-d tensors; ``None``: no recency term). :class:`HIRModel`
    learns both: on Amazon Beauty, started at 16 and 1, they end near 4 and 2 (Recall@10 0.052 →
    0.059); on the synthetic ecosystem, whose users draw each engagement from one of their
    interests, near 0.1 (the term fades out; README, "Recency pooling").

    With the config's ``pool_direct`` an anchor of type ``c`` keeps only its hop-1 tokens
    (``a_s = 0`` for its own token and the walk's further ones): a user has no content of its own,
    and its own hashed id, trained on a handful of examples, and the other users and items the walk
    reaches only blur what it engaged with (README, "Users pool what they engaged with").
    """
    weight = view.rw_prob.clamp(0, 1) + (view.hop == 0).float()
    user = view.node_type[:, :1] == config.recency_type  # all False when recency_type is -1
    if recency is not None and config.recency_type >= 0:
        rho, half_rank = recency
        entries = recency_entries(view, config.recency_edge_types)
        weight = weight + rho * (entries & user).float() * torch.exp2(-recency_ranks(view, entries).float() / half_rank)
    if config.pool_direct:
        weight = torch.where(user & (view.hop != 1), 0.0, weight)
    return weight * (~view.pad).float()


def encoder_config_for(graph: TemporalGraph, dim: int, layers: int, heads: int, wk_dim: int = 0, **extra: Any) -> EncoderConfig:
    """An encoder config sized for ``graph``: its node and edge types, metadata width and the type
    id of its users (``recency_type``).

    Args:
        graph: the snapshot; ``dim``, ``layers``, ``heads``: model size; ``wk_dim``: world
            knowledge width (0 for none); ``extra``: any other :class:`EncoderConfig` field.
    """
    extra.setdefault("recency_type", graph.node_types.index("user") if "user" in graph.node_types else -1)
    return EncoderConfig(
        dim=dim, layers=layers, heads=heads, wk_dim=wk_dim,
        num_node_types=max(1, len(graph.node_types)), num_edge_types=max(1, len(graph.edge_types)),
        meta_dim=int(graph.node_features.shape[1]), **extra,
    )


@dataclass
class WorldKnowledge:
    """Per-node world-knowledge vectors ``vectors`` ``[N, d]`` and ``has`` ``[N]`` (True where a node has any)."""

    vectors: torch.Tensor
    has: torch.Tensor

    @classmethod
    def of(cls, vectors: torch.Tensor | None) -> "WorldKnowledge | None":
        """Wrap ``[N, d]`` vectors (all-zero rows mean "none"); ``None`` stays ``None``."""
        if vectors is None:
            return None
        vectors = vectors.float()
        return cls(vectors, vectors.ne(0).any(dim=1))

    def per_token(self, view) -> tuple[torch.Tensor, torch.Tensor]:
        """``([B, S, d] vectors, [B, S] has)`` of the view's tokens (see :func:`gather_wk`)."""
        device = view.node.device
        return gather_wk(view, self.vectors.to(device), self.has.to(device))
