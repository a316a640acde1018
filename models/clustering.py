"""Interest clusters of embeddings: spherical k-means and its two-level nested form."""

from __future__ import annotations

import torch
import torch.nn as nn


def kmeans(x: torch.Tensor, k: int, iters: int = 25, seed: int = 0) -> torch.Tensor:
    """Spherical k-means of the rows of ``x`` ``[N, d]``: labels ``[N]`` int64 in ``[0, k)``.

    Rows are L2-normalised; centres start at ``k`` k-means++ picks and alternate
    ``label_i = argmax_j ⟨x_i, c_j⟩`` and ``c_j = normalise(Σ_{label_i = j} x_i)`` (an emptied
    centre is re-seeded at the row worst served by its centre). Deterministic for ``seed``.
    """
    n = x.shape[0]
    if n <= k:
        return torch.arange(n, dtype=torch.int64)
    x = nn.functional.normalize(x.float(), dim=1)
    gen = torch.Generator().manual_seed(seed)
    centres = x[torch.randint(n, (1,), generator=gen)]
    for _ in range(1, k):
        gap = (1 - (x @ centres.T).max(dim=1).values).clamp_min(0) ** 2
        centres = torch.cat([centres, x[torch.multinomial(gap + 1e-12, 1, generator=gen)]])
    for _ in range(iters):
        sim = x @ centres.T
        labels = sim.argmax(dim=1)
        sums = torch.zeros_like(centres).index_add_(0, labels, x)
        empty = torch.bincount(labels, minlength=k) == 0
        if empty.any():
            worst = sim.max(dim=1).values.argsort()[: int(empty.sum())]
            sums[empty] = x[worst]
        centres = nn.functional.normalize(sums, dim=1)
    return (x @ centres.T).argmax(dim=1)


def nested_clusters(embedding: torch.Tensor, node_type: torch.Tensor, coarse: int, fine: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Two-level interest clusters of embeddings, free of the node-type offset.

    Each node type's mean is subtracted from its normalised embeddings (so clusters follow content,
    not type); spherical :func:`kmeans` gives ``coarse`` clusters, then inside coarse cluster ``c``
    a k-means into ``fine // coarse`` clusters gives fine label ``c · (fine // coarse) + j``, so every
    fine cluster nests in exactly one coarse cluster.

    Args:
        embedding: ``[N, d]`` representations; ``node_type``: ``[N]`` int64 type ids.
        coarse: ``K₁``; ``fine``: ``K₂`` (``K₂ // K₁`` children per coarse cluster, at least 1).
        seed: k-means seed.

    Returns:
        ``(coarse [N], fine [N])`` int64 labels.
    """
    x = nn.functional.normalize(embedding.float(), dim=1)
    for t in node_type.unique():
        rows = node_type == t
        x[rows] = x[rows] - x[rows].mean(dim=0)
    top = kmeans(x, coarse, seed=seed)
    per = max(1, fine // max(1, coarse))
    low = torch.zeros_like(top)
    for c in range(coarse):
        rows = (top == c).nonzero().squeeze(1)
        if rows.numel():
            low[rows] = kmeans(x[rows], per, seed=seed + 1 + c)
    return top, top * per + low
