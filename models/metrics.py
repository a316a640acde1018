"""Full-ranking retrieval metrics: Recall@K, NDCG@K and MRR, vectorised over a batch of queries.

A query is one user with one or several target items; every item of the catalogue is a candidate
except the query's *excluded* items (e.g. the user's earlier items, masked as the published
S3-Rec/TIGER evaluation code does). An excluded target is a miss: it can never be retrieved.

Ties are broken uniformly at random and the metrics are their exact expectation over that draw, so
a scorer that gives many items the same score (popularity, co-occurrence, a user without history)
is neither flattered nor penalised by the order items happen to be stored in. For a target ``t``
with ``g`` candidates scoring strictly higher and ``e`` other candidates scoring the same, its
position ``p`` is uniform on ``g+1 .. g+e+1``, hence

* ``P(p <= K) = clip(K - g, 0, e + 1) / (e + 1)``
* ``E[1(p <= K) / log2(p + 1)] = (D[min(g+e+1, K)] - D[min(g, K)]) / (e + 1)`` with
  ``D[n] = sum_{i=1..n} 1 / log2(i + 1)``
* ``E[1 / p] = (H[g+e+1] - H[g]) / (e + 1)`` with ``H`` the harmonic numbers.

Per query with ``n`` targets: ``Recall@K = sum_t P(p_t <= K) / n``;
``NDCG@K = sum_t E[1(p_t <= K) / log2(p_t + 1)] / D[min(n, K)]`` (both exact expectations, since
they are sums over targets); ``MRR = max_t E[1 / p_t]`` (exact for one target; with several targets
tied with each other it slightly under-counts). Reported figures are means over queries.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch

EULER_GAMMA = 0.5772156649015329


def _harmonic(n: torch.Tensor) -> torch.Tensor:
    """``H[n] = sum_{i=1..n} 1/i`` for integer ``n >= 0`` (``H[0] = 0``), via the digamma function."""
    return torch.special.digamma(n.double() + 1.0) + EULER_GAMMA


def _discount_prefix(k: int) -> torch.Tensor:
    """``D[0..k]`` with ``D[n] = sum_{i=1..n} 1 / log2(i + 1)``."""
    positions = torch.arange(1, k + 1, dtype=torch.float64)
    return torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(1.0 / torch.log2(positions + 1.0), 0)])


def pad_targets(targets: Sequence[Sequence[int]] | np.ndarray | torch.Tensor) -> torch.Tensor:
    """Targets as a ``[Q, T]`` int64 tensor padded with ``-1``.

    Args:
        targets: a 1-D array (one target per query), a 2-D array already padded with ``-1``, or a
            list of per-query lists of item indices (each non-empty).
    """
    if isinstance(targets, (np.ndarray, torch.Tensor)):
        out = torch.as_tensor(np.asarray(targets), dtype=torch.int64)
        return out.unsqueeze(1) if out.dim() == 1 else out
    width = max((len(t) for t in targets), default=1)
    out = torch.full((len(targets), max(width, 1)), -1, dtype=torch.int64)
    for row, items in enumerate(targets):
        out[row, : len(items)] = torch.as_tensor(list(items), dtype=torch.int64)
    return out


def _greater_and_ties(scores: torch.Tensor, target_scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per target: candidates scoring strictly higher, and other candidates scoring the same.

    Counts by comparison when there are few targets per query (``O(T * I)``), else by one sort
    and binary search (``O(I log I)``); both give the same counts.
    """
    if target_scores.shape[1] <= 16:
        greater = torch.stack([(scores > target_scores[:, [j]]).sum(1) for j in range(target_scores.shape[1])], 1)
        at_least = torch.stack([(scores >= target_scores[:, [j]]).sum(1) for j in range(target_scores.shape[1])], 1)
    else:
        ascending = torch.sort(scores, dim=1).values
        n_items = scores.shape[1]
        greater = n_items - torch.searchsorted(ascending, target_scores.contiguous(), right=True)
        at_least = n_items - torch.searchsorted(ascending, target_scores.contiguous(), right=False)
    greater = greater.double()
    return greater, (at_least - 1).double() - greater


def ranking_metrics(
    scores: torch.Tensor,
    targets: torch.Tensor,
    exclude: torch.Tensor | None = None,
    ks: Sequence[int] = (10,),
) -> dict[str, torch.Tensor]:
    """Per-query Recall@K, NDCG@K and MRR under full ranking (see the module docstring for the maths).

    Args:
        scores: ``[Q, I]`` finite scores, higher is better, one row per query over all ``I`` items.
        targets: ``[Q]`` or ``[Q, T]`` int64 item indices, padded with ``-1``; each query needs at
            least one target.
        exclude: optional ``[Q, I]`` bool; ``True`` removes the item from the query's candidates.
        ks: cut-offs ``K``.

    Returns:
        ``{"recall@K": [Q], "ndcg@K": [Q], ..., "mrr": [Q]}`` as float64 tensors.
    """
    scores = scores.detach().to(torch.float32)
    if not torch.isfinite(scores.sum(dtype=torch.float64)):
        raise ValueError("scores must be finite (mask items with `exclude`, not with -inf)")
    targets = targets.unsqueeze(1) if targets.dim() == 1 else targets
    valid = targets >= 0
    n_targets = valid.sum(1)
    if (n_targets == 0).any():
        raise ValueError("every query needs at least one target")
    if exclude is not None:
        scores = scores.masked_fill(exclude, float("-inf"))
    target_scores = scores.gather(1, targets.clamp(min=0))
    hit_possible = valid & torch.isfinite(target_scores)
    greater, ties = _greater_and_ties(scores, target_scores)
    out: dict[str, torch.Tensor] = {}
    for k in ks:
        p_hit = torch.minimum((k - greater).clamp(min=0.0), ties + 1.0) / (ties + 1.0)
        recall = torch.where(hit_possible, p_hit, 0.0).sum(1) / n_targets
        disc = _discount_prefix(k)
        hi = (greater + ties + 1.0).clamp(max=k).long()
        lo = greater.clamp(max=k).long()
        gain = torch.where(hit_possible, (disc[hi] - disc[lo]) / (ties + 1.0), 0.0).sum(1)
        out[f"recall@{k}"] = recall
        out[f"ndcg@{k}"] = gain / disc[n_targets.clamp(max=k)]
    reciprocal = (_harmonic(greater + ties + 1.0) - _harmonic(greater)) / (ties + 1.0)
    out["mrr"] = torch.where(hit_possible, reciprocal, 0.0).max(1).values
    return out


def exclusion_mask(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray, n_items: int) -> torch.Tensor:
    """``[len(rows), n_items]`` bool mask from a CSR: row ``r`` is ``True`` at ``indices[indptr[r]:indptr[r+1]]``.

    Args:
        indptr, indices: the CSR (one row per query) of excluded items.
        rows: which CSR rows (queries) the mask is for, in order.
        n_items: catalogue size.
    """
    starts, ends = indptr[rows], indptr[rows + 1]
    lengths = ends - starts
    mask = torch.zeros((len(rows), n_items), dtype=torch.bool)
    if lengths.sum() == 0:
        return mask
    flat = np.concatenate([indices[s:e] for s, e in zip(starts, ends)])
    which = np.repeat(np.arange(len(rows)), lengths)
    mask[torch.as_tensor(which), torch.as_tensor(flat, dtype=torch.int64)] = True
    return mask


def per_query_metrics(
    score_fn: Callable[[np.ndarray], torch.Tensor],
    targets: torch.Tensor,
    n_items: int,
    exclude_indptr: np.ndarray | None = None,
    exclude_indices: np.ndarray | None = None,
    ks: Sequence[int] = (10,),
    batch_size: int = 1024,
) -> dict[str, np.ndarray]:
    """Every query's metrics, scoring ``batch_size`` queries at a time: the figures paired
    comparisons between scorers resample (:func:`paired_bootstrap`).

    Args:
        score_fn: maps query row numbers ``rows`` (an int64 array into ``targets``) to ``[len(rows), n_items]`` scores.
        targets: ``[Q, T]`` padded targets (see :func:`pad_targets`).
        n_items: catalogue size ``I``.
        exclude_indptr, exclude_indices: optional CSR of each query's excluded items.
        ks: cut-offs.
        batch_size: queries per batch (memory is ``batch_size * n_items`` floats).

    Returns:
        ``{"recall@K": [Q], "ndcg@K": [Q], ..., "mrr": [Q]}`` float64 arrays.
    """
    targets = pad_targets(targets)
    parts: dict[str, list[np.ndarray]] = {}
    for start in range(0, len(targets), batch_size):
        rows = np.arange(start, min(start + batch_size, len(targets)))
        mask = None
        if exclude_indptr is not None:
            mask = exclusion_mask(exclude_indptr, exclude_indices, rows, n_items)
        batch = ranking_metrics(score_fn(rows), targets[rows], mask, ks)
        for name, values in batch.items():
            parts.setdefault(name, []).append(values.numpy())
    names = [f"{m}@{k}" for k in ks for m in ("recall", "ndcg")] + ["mrr"]
    return {name: np.concatenate(parts[name]) if name in parts else np.zeros(0) for name in names}


def query_means(per_query: dict[str, np.ndarray]) -> dict[str, float]:
    """``{"recall@K": mean, ..., "mrr": mean, "queries": Q}`` of :func:`per_query_metrics`' output."""
    count = len(next(iter(per_query.values()))) if per_query else 0
    return {name: float(values.mean()) if count else 0.0 for name, values in per_query.items()} | {"queries": count}


def paired_bootstrap(a: np.ndarray, b: np.ndarray, replicates: int = 1000, seed: int = 0, level: float = 0.95) -> list[float]:
    """Percentile interval of ``mean(a) − mean(b)`` for two scorers' per-query figures on the same
    queries: each replicate draws the ``Q`` queries with replacement and both scorers are scored on
    the same draw (paired), so what the queries share (hard users, easy ones) cancels.

    Args:
        a, b: ``[Q]`` per-query figures (e.g. :func:`per_query_metrics`' ``recall@10``) of the two scorers.
        replicates: bootstrap draws; seed: their seed; level: the interval's coverage.

    Returns:
        ``[low, high]``.
    """
    difference = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    q = len(difference)
    if q == 0:
        return [float("nan"), float("nan")]
    rng = np.random.default_rng(seed)
    means = np.empty(replicates)
    chunk = max(1, 2_000_000 // q)  # draws per batch: bounded memory on large query sets
    for start in range(0, replicates, chunk):
        n = min(chunk, replicates - start)
        means[start:start + n] = difference[rng.integers(0, q, (n, q))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    return [float(np.percentile(means, tail)), float(np.percentile(means, 100 - tail))]
