"""The engagement head: does an edge ``(u, v)`` of a given engagement type exist at a given time?

``logit(u, v, r, Δ) = ⟨W_u ū, W_v v̄ ⊙ (1 + e_r)⟩ / √h + MLP([ū ⊙ v̄, |ū − v̄|, e_r, φ(Δ)]) + b_r``

where ``ū, v̄`` are the layer-normalised representations, ``e_r`` the engagement-type embedding,
``b_r`` a per-type bias and ``φ(Δ)`` a log-scaled sinusoidal encoding of the edge's age ``Δ``
(days before the cut-off). It is trained with binary cross-entropy of true engagements against
two kinds of negatives that share the positive's ``u``, ``r`` and ``Δ``: candidates drawn by
smoothed popularity (the trainer's pool) and in-batch destinations (the ``v`` of another positive).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

SECONDS_PER_DAY = 86_400.0


def time_encoding(age_days: torch.Tensor, dim: int) -> torch.Tensor:
    """``φ(Δ)``: sin/cos of ``log1p(Δ) · ω_j`` for ``dim/2`` frequencies ``ω_j = 2^{j/2}``.

    Args:
        age_days: ``[...]`` non-negative ages in days (negative values are clamped to zero).
        dim: even output width; the result is ``[..., dim]``.
    """
    x = torch.log1p(age_days.float().clamp_min(0)).unsqueeze(-1)
    freqs = 2.0 ** (torch.arange(dim // 2, device=x.device, dtype=torch.float32) / 2)
    return torch.cat([torch.sin(x * freqs), torch.cos(x * freqs)], dim=-1)


class EngagementHead(nn.Module):
    """Scores ``(u, v, engagement type, age)`` → logit that the edge exists.

    Args:
        dim: width of the representations ``u`` and ``v``.
        num_types: number of engagement (edge) types.
        hidden: width of the bilinear projections and of the MLP.
        time_dim: width of the time encoding ``φ``.
    """

    def __init__(self, dim: int, num_types: int, hidden: int = 64, time_dim: int = 8):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.proj_u = nn.Linear(dim, hidden, bias=False)
        self.proj_v = nn.Linear(dim, hidden, bias=False)
        self.type_gate = nn.Embedding(num_types, hidden)
        nn.init.zeros_(self.type_gate.weight)
        self.type_embedding = nn.Embedding(num_types, hidden)
        self.type_bias = nn.Embedding(num_types, 1)
        nn.init.zeros_(self.type_bias.weight)
        self.time_dim = time_dim
        self.mlp = nn.Sequential(
            nn.Linear(2 * dim + hidden + time_dim, hidden), nn.GELU(), nn.Linear(hidden, 1)
        )
        self.scale = 1.0 / math.sqrt(hidden)

    def forward(self, u: torch.Tensor, v: torch.Tensor, edge_type: torch.Tensor, age_days: torch.Tensor) -> torch.Tensor:
        """Logits ``[...]`` for representations ``u, v`` ``[..., dim]``, types and ages (days) ``[...]``.

        The leading shapes broadcast: ``u`` ``[B, 1, dim]`` against candidates ``v`` ``[B, K, dim]``
        with types and ages ``[B, 1]`` scores each user's ``K`` candidates.
        """
        u, v = self.norm(u), self.norm(v)
        gate = 1.0 + self.type_gate(edge_type)
        bilinear = (self.proj_u(u) * self.proj_v(v) * gate).sum(dim=-1) * self.scale
        pair = torch.cat([u * v, (u - v).abs()], dim=-1)
        edge = torch.cat([self.type_embedding(edge_type), time_encoding(age_days, self.time_dim)], dim=-1)
        features = torch.cat([pair, edge.expand(*pair.shape[:-1], -1)], dim=-1)
        return bilinear + self.mlp(features).squeeze(-1) + self.type_bias(edge_type).squeeze(-1)


def random_negatives(num_nodes: int, n: int, generator: torch.Generator) -> torch.Tensor:
    """``n`` node indices drawn uniformly from ``[0, num_nodes)``."""
    return torch.randint(0, num_nodes, (n,), generator=generator)


def popularity_weights(degree: torch.Tensor, power: float = 0.75) -> torch.Tensor:
    """Cumulative sampling weights ``∝ degree^power`` (float64), for :func:`popularity_negatives`."""
    return torch.cumsum(degree.double().clamp_min(0) ** power, dim=0)


def popularity_negatives(cumulative: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
    """``n`` node indices with probability ``∝ degree^0.75`` from the cumulative weights.

    Inverse-CDF sampling: ``searchsorted(cumsum(w), U · Σw)`` with ``U ~ Uniform[0, 1)``.
    """
    draws = torch.rand(n, generator=generator, dtype=torch.float64) * cumulative[-1]
    return torch.searchsorted(cumulative, draws, right=True).clamp_max(cumulative.numel() - 1)


def in_batch_permutation(n: int, generator: torch.Generator) -> torch.Tensor:
    """A cyclic shift by ``k ∈ [1, n)``: position ``i`` takes the destination of ``(i + k) mod n``,
    so no positive is paired with its own destination."""
    shift = int(torch.randint(1, max(2, n), (1,), generator=generator)) if n > 1 else 0
    return (torch.arange(n) + shift) % max(n, 1)


def engagement_loss(
    head: EngagementHead,
    u: torch.Tensor,
    v: torch.Tensor,
    negatives: list[torch.Tensor],
    edge_type: torch.Tensor,
    age_days: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Binary cross-entropy of true edges against each set of negatives.

    ``L = BCE(logit(u, v), 1) + (1/|N|) Σ_n BCE(logit(u, v_n), 0)``: positives and the average
    negative set weigh equally.

    Args:
        head: the engagement head.
        u, v: ``[B, dim]`` representations of the positive edges' endpoints.
        negatives: representations ``[B, dim]`` of each negative set's destinations.
        edge_type: ``[B]`` engagement types; ``age_days``: ``[B]`` edge ages in days.

    Returns:
        ``(loss, positive logits [B], negative logits [len(negatives) · B])``.
    """
    pos = head(u, v, edge_type, age_days)
    neg = torch.cat([head(u, n, edge_type, age_days) for n in negatives])
    loss = F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos))
    loss = loss + F.binary_cross_entropy_with_logits(neg, torch.zeros_like(neg))
    return loss, pos.detach(), neg.detach()


def auc(positive: torch.Tensor, negative: torch.Tensor) -> float:
    """Area under the ROC curve: ``P(score⁺ > score⁻) + ½ P(score⁺ = score⁻)`` (Mann-Whitney)."""
    scores = torch.cat([positive, negative]).double()
    labels = torch.cat([torch.ones_like(positive), torch.zeros_like(negative)]).double()
    order = torch.argsort(scores)
    ranks = torch.empty_like(scores)
    ranks[order] = torch.arange(1, scores.numel() + 1, dtype=torch.float64)
    # Average the ranks of tied scores.
    unique, inverse = torch.unique(scores, return_inverse=True)
    sums = torch.zeros_like(unique).index_add_(0, inverse, ranks)
    counts = torch.zeros_like(unique).index_add_(0, inverse, torch.ones_like(ranks))
    ranks = (sums / counts)[inverse]
    n_pos, n_neg = float(labels.sum()), float((1 - labels).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    return float((ranks[labels == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
