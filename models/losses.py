"""Training losses: Sinkhorn-Knopp balanced assignment, two-level prototype cross-entropy,
hierarchical consistency, InfoNCE, the logQ-corrected sampled softmax of the next-engagement task,
and collapse metrics.

Notation: a batch of ``B`` teacher scores ``S ∈ R^{B×K}`` (cosine similarities of L2-normalised
projections to ``K`` L2-normalised prototypes); ``ε`` the Sinkhorn temperature; ``τ`` the student
temperature. The coarse level has ``K₁`` prototypes, the fine level ``K₂``; each fine prototype
belongs to one coarse prototype through the parent map ``A ∈ R^{K₂×K₁}`` (rows sum to one).
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

# A function that sums a tensor over all processes (identity on one process).
ReduceSum = Callable[[torch.Tensor], torch.Tensor]


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def sinkhorn(scores: torch.Tensor, eps: float = 0.05, iters: int = 3, reduce_sum: ReduceSum | None = None) -> torch.Tensor:
    """Balanced soft assignment of ``B`` samples to ``K`` prototypes (Sinkhorn-Knopp, as in SwAV).

    Solves ``max_Q ⟨Q, S⟩ + ε H(Q)`` over the transport polytope where every sample carries mass
    ``1/B`` and every prototype receives mass ``1/K``. The solution has the form
    ``Q = diag(u) · exp(S/ε) · diag(v)``; Sinkhorn-Knopp finds ``u`` and ``v`` by alternately
    rescaling the columns to sum ``1/K`` and the rows to sum ``1/B``. After ``iters`` rounds the
    rows are rescaled last, so each returned row (multiplied by ``B``) is a probability
    distribution over prototypes and the column sums are ``≈ B/K`` (exactly balanced in the limit).

    The computation runs in float64 with the global maximum subtracted from ``S/ε`` before the
    exponential, so ``ε`` down to ~0.02 with cosine scores neither overflows nor underflows.

    Args:
        scores: ``[B, K]`` teacher scores; no gradient flows through the result.
        eps: entropy weight ``ε``; smaller is sharper.
        iters: Sinkhorn iterations (3 suffice in practice).
        reduce_sum: sums a tensor over all processes so that the column constraint holds for the
            global batch under data parallelism; ``None`` on one process.

    Returns:
        ``[B, K]`` float32 assignments whose rows sum to one.
    """
    reduce_sum = reduce_sum or _identity
    with torch.no_grad():
        logits = scores.detach().double() / eps
        q = torch.exp(logits - _common_max(logits, reduce_sum))
        batch = reduce_sum(torch.tensor([float(q.shape[0])], dtype=torch.float64, device=q.device))
        k = q.shape[1]
        q = q / reduce_sum(q.sum().reshape(1))
        for _ in range(iters):
            q = q / reduce_sum(q.sum(dim=0)).clamp_min(1e-300) / k
            q = q / q.sum(dim=1, keepdim=True).clamp_min(1e-300) / batch
        return (q * batch).float()


def _common_max(logits: torch.Tensor, reduce_sum: ReduceSum) -> torch.Tensor:
    """A shift common to all processes: the mean over processes of each process's maximum.

    Any common constant cancels in the normalisation; the mean of maxima keeps ``exp`` in range
    because cosine scores differ by at most ``2/ε`` between processes.
    """
    local = logits.max().reshape(1)
    count = reduce_sum(torch.ones(1, dtype=logits.dtype, device=logits.device))
    return reduce_sum(local) / count


def standardize(scores: torch.Tensor, scale: float = 0.1) -> torch.Tensor:
    """Per-prototype z-scores over the batch, times ``scale``: ``scale · (S − mean_b S) / std_b S``.

    Sinkhorn-Knopp on raw cosine scores returns uniform targets when every sample scores every
    prototype alike (early in training, or when the projection drifts orthogonal to all
    prototypes); on standardised scores the relative preferences decide, so the targets stay sharp.
    ``scale`` puts the z-scores in the range of cosine scores, so ``ε`` keeps its meaning.
    """
    centred = scores - scores.mean(dim=0, keepdim=True)
    return scale * centred / centred.std(dim=0, keepdim=True).clamp_min(1e-6)


def soft_cross_entropy(targets: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """``mean_b − Σ_k q_bk log softmax(z_b)_k``: cross-entropy of student logits ``z`` against
    teacher assignments ``q`` (rows of ``q`` sum to one)."""
    return -(targets * F.log_softmax(logits, dim=-1)).sum(dim=-1).mean()


def info_nce(anchor: torch.Tensor, positive: torch.Tensor, negatives: torch.Tensor, temperature: float = 0.1) -> torch.Tensor:
    """Symmetric InfoNCE between the two ends of ``B`` positive pairs.

    With ``a = anchor/‖anchor‖``, ``p = positive/‖positive‖`` and extra negatives ``n`` (normalised
    the same way), row ``b`` scores ``[⟨a_b, p_j⟩]_j ++ [⟨a_b, n_m⟩]_m`` divided by ``temperature``
    and the loss is the cross-entropy of the true partner ``p_b`` (in-batch partners of the other
    pairs and the extra rows are negatives); the same is done from ``p`` to ``a`` and the two
    directions are averaged:

    ``L = ½ [CE(softmax([a Pᵀ, a Nᵀ]/T), I) + CE(softmax([p Aᵀ, p Nᵀ]/T), I)]``.

    Args:
        anchor: ``[B, d]`` representations of one end of each pair.
        positive: ``[B, d]`` representations of the other end.
        negatives: ``[M, d]`` extra negatives (``M`` may be 0).
        temperature: ``T`` of the softmax.
    """
    a, p, n = F.normalize(anchor, dim=-1), F.normalize(positive, dim=-1), F.normalize(negatives, dim=-1)
    target = torch.arange(a.shape[0], device=a.device)
    forward = torch.cat([a @ p.T, a @ n.T], dim=1) / temperature
    backward = torch.cat([p @ a.T, p @ n.T], dim=1) / temperature
    return 0.5 * (F.cross_entropy(forward, target) + F.cross_entropy(backward, target))


def sampled_softmax(
    query: torch.Tensor,
    candidates: torch.Tensor,
    candidate_node: torch.Tensor,
    log_q: torch.Tensor,
    temperature: float = 0.1,
    log_prior: torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """Sampled softmax with the logQ correction: the full softmax over the catalogue, estimated from
    sampled candidates.

    The task's full softmax scores row ``b`` (an anchor as of its example's time) against every
    catalogue item ``i`` with ``z_bi = ⟨q̂_b, ĉ_i⟩ / T + π_bi`` — cosine over the temperature plus
    the log prior ``π`` that scoring adds (:class:`~hir.models.baselines.PriorCorrectedScorer`) —
    and ``L = −log softmax(z_b)_{y_b}``. Here the candidates are ``C ≥ B`` sampled items, the first
    ``B`` the batch's positives (row ``b``'s positive is candidate ``b``), and each logit is
    corrected by the log of the candidate's expected count ``Q`` among a row's candidates:

    ``ẑ_bj = ⟨q̂_b, ĉ_j⟩ / T + π_bj − log Q(j)``,  ``L = Σ_b w_b CE(softmax(ẑ_b), b) / Σ_b w_b``.

    Since ``E[Σ_j exp(ẑ_bj)] = Σ_i exp(z_bi)`` over the catalogue, the corrected loss estimates the
    full one (consistent as ``C`` grows); without the correction it would learn
    ``z − log Q`` and rank rarely sampled items too high. A candidate that is row ``b``'s own positive
    item but not column ``b`` (the same item positive in another row, or drawn into the pool) is
    masked out of row ``b``: it is not a negative.

    Args:
        query: ``[B, d]`` anchor representations.
        candidates: ``[C, d]`` candidate representations, the ``B`` positives first.
        candidate_node: int64 ``[C]`` the candidates' nodes (which of them are the same item).
        log_q: ``[C]`` ``log Q`` of each candidate (:meth:`~hir.models.candidates.CandidateSampler.log_q`).
        temperature: ``T``.
        log_prior: ``π``, ``[C]`` or ``[B, C]`` (per row, e.g. the prior as of each row's time);
            ``None`` for none.
        weight: ``[B]`` example weights (the funnel weights); ``None`` weighs rows equally.
    """
    batch = query.shape[0]
    logits = F.normalize(query, dim=-1) @ F.normalize(candidates, dim=-1).T / temperature - log_q.to(query.dtype)
    if log_prior is not None:
        logits = logits + log_prior.to(query.dtype)
    target = torch.arange(batch, device=query.device)
    same_item = candidate_node.unsqueeze(0) == candidate_node[:batch].unsqueeze(1)
    same_item[target, target] = False
    losses = F.cross_entropy(logits.masked_fill(same_item, float("-inf")), target, reduction="none")
    if weight is None:
        return losses.mean()
    weight = weight.to(losses.dtype)
    return (weight * losses).sum() / weight.sum().clamp_min(1e-12)


def prob_cross_entropy(targets: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """``mean_b − Σ_k q_bk log p_bk`` for probabilities ``p`` (clamped away from zero)."""
    return -(targets * probs.clamp_min(1e-8).log()).sum(dim=-1).mean()


class Prototypes(nn.Module):
    """Two levels of learnable, L2-normalised prototypes and the parent map between them.

    Scores are cosine similarities ``s_k = ⟨z, c_k⟩ / (‖z‖ ‖c_k‖)``. The parent map is learned:
    ``A = softmax(W / τ_A)`` over the coarse axis, so fine prototype ``f`` belongs to coarse
    prototype ``c`` with probability ``A[f, c]``; its hard parent is ``argmax_c A[f, c]``.

    Args:
        dim: projection dimension.
        coarse: ``K₁``, the number of coarse prototypes.
        fine: ``K₂``, the number of fine prototypes.
        parent_temperature: ``τ_A`` of the parent map.
    """

    def __init__(self, dim: int, coarse: int, fine: int, parent_temperature: float = 0.1):
        super().__init__()
        self.coarse = nn.Parameter(F.normalize(torch.randn(coarse, dim), dim=1))
        self.fine = nn.Parameter(F.normalize(torch.randn(fine, dim), dim=1))
        # Start with each fine prototype assigned to coarse prototype (f mod K₁), softly.
        init = torch.zeros(fine, coarse)
        init[torch.arange(fine), torch.arange(fine) % coarse] = 1.0
        self.parent_logits = nn.Parameter(init * 0.5)
        self.parent_temperature = parent_temperature

    def scores(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cosine scores ``([B, K₁], [B, K₂])`` of projections ``z`` ``[B, dim]``."""
        z = F.normalize(z, dim=-1)
        return z @ F.normalize(self.coarse, dim=1).T, z @ F.normalize(self.fine, dim=1).T

    def parent_map(self) -> torch.Tensor:
        """``A`` ``[K₂, K₁]``: row ``f`` is the distribution of fine prototype ``f`` over parents."""
        return torch.softmax(self.parent_logits / self.parent_temperature, dim=1)

    def hard_parent(self) -> torch.Tensor:
        """``[K₂]`` int64: the coarse parent of each fine prototype."""
        return self.parent_logits.argmax(dim=1)

    def assign(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Nested hard assignments ``(coarse [B], fine [B])`` of projections ``z``.

        The coarse prototype is the best-scoring one; the fine prototype is the best-scoring among
        the children of that coarse prototype (the best overall when it has no children), so the
        fine prototype always nests in the coarse one when the coarse one has children.
        """
        return self.assign_scores(*self.scores(z))

    def assign_scores(self, coarse_scores: torch.Tensor, fine_scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`assign` from precomputed (e.g. standardised) scores ``[B, K₁]`` and ``[B, K₂]``."""
        coarse = coarse_scores.argmax(dim=1)
        parent = self.hard_parent()
        children = parent[None, :] == coarse[:, None]  # [B, K₂]
        has_child = children.any(dim=1, keepdim=True)
        masked = fine_scores.masked_fill(~children & has_child, float("-inf"))
        return coarse, masked.argmax(dim=1)


def hierarchy_loss(
    q_coarse: torch.Tensor,
    q_fine: torch.Tensor,
    p_coarse: torch.Tensor,
    p_fine: torch.Tensor,
    parent_map: torch.Tensor,
) -> torch.Tensor:
    """Consistency between the two levels through the parent map ``A``.

    A coarse probability is the sum of its children's fine probabilities, ``p̂_c = Σ_f p_f A[f, c]``.
    The loss asks (1) the student's fine predictions, aggregated, to match the teacher's coarse
    assignment and (2) the student's coarse predictions to match the teacher's fine assignment,
    aggregated:

    ``L = ½ [ CE(q_coarse, p_fine · A) + CE(q_fine · A, p_coarse) ]``.

    Args:
        q_coarse: ``[B, K₁]`` teacher coarse assignments (rows sum to one).
        q_fine: ``[B, K₂]`` teacher fine assignments.
        p_coarse: ``[B, K₁]`` student coarse probabilities.
        p_fine: ``[B, K₂]`` student fine probabilities.
        parent_map: ``A`` ``[K₂, K₁]`` with rows summing to one.
    """
    up_student = p_fine @ parent_map
    up_teacher = q_fine @ parent_map
    return 0.5 * (prob_cross_entropy(q_coarse, up_student) + prob_cross_entropy(up_teacher, p_coarse))


def usage_entropy(assignment: torch.Tensor, k: int) -> float:
    """Normalised entropy ``H(usage) / log K`` of hard assignments ``[B]`` over ``K`` prototypes:
    1 when every prototype is used equally, 0 when one prototype takes everything."""
    usage = torch.bincount(assignment.reshape(-1).cpu(), minlength=k).double()
    usage = usage / usage.sum().clamp_min(1)
    nonzero = usage[usage > 0]
    return float(-(nonzero * nonzero.log()).sum() / math.log(k)) if k > 1 else 1.0


def top_share(assignment: torch.Tensor, k: int) -> float:
    """Share of the samples on the most used prototype (``1/K`` balanced, 1 collapsed)."""
    usage = torch.bincount(assignment.reshape(-1).cpu(), minlength=k)
    return float(usage.max()) / max(1, int(usage.sum()))


def embedding_std(embeddings: torch.Tensor) -> float:
    """Mean over dimensions of the batch standard deviation of L2-normalised embeddings.

    0 means every embedding is the same (collapse); isotropic embeddings give ``≈ 1/√d``.
    """
    z = F.normalize(embeddings.detach().float(), dim=-1)
    return float(z.std(dim=0).mean()) if z.shape[0] > 1 else 0.0


def collapse_metrics(coarse: torch.Tensor, fine: torch.Tensor, k_coarse: int, k_fine: int, embeddings: torch.Tensor) -> dict[str, float]:
    """The collapse guards of one batch: usage entropy and top share at both levels, embedding std.

    Args:
        coarse: ``[B]`` coarse prototype per sample; ``fine``: ``[B]`` fine prototype per sample.
        k_coarse, k_fine: ``K₁`` and ``K₂``.
        embeddings: ``[B, d]`` encoder outputs.
    """
    return {
        "entropy_coarse": usage_entropy(coarse, k_coarse),
        "entropy_fine": usage_entropy(fine, k_fine),
        "top_share_coarse": top_share(coarse, k_coarse),
        "top_share_fine": top_share(fine, k_fine),
        "emb_std": embedding_std(embeddings),
    }
