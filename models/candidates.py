"""Candidates of the target type for a sampled softmax, and how often each is expected among them.

For a batch of ``B`` examples drawn uniformly (:meth:`~hir.models.examples.CausalExamples.draw`),
every row's candidates are the batch's ``B`` positives (in-batch negatives: node ``i`` is each of
them with probability ``p_b(i)``, its share of the examples' positives) plus ``M`` nodes shared by
the batch, drawn with replacement from the pool distribution

``q_pool(i) = (n_i + 1)^α / Σ_j (n_j + 1)^α`` over the target nodes,

``n_i`` the examples whose positive is ``i`` (``α < 1`` flattens popularity; the ``+ 1`` keeps
every target node drawable, new ones included). Node ``i`` is then expected
``Q(i) = B · p_b(i) + M · q_pool(i)`` times among a row's candidates, and ``log Q(i)`` is the
correction the sampled softmax subtracts (:func:`~hir.models.losses.sampled_softmax`).
"""

from __future__ import annotations

import torch
from hir.models.examples import CausalExamples


class CandidateSampler:
    """The shared pool of target-type candidates and ``log Q`` of any candidate.

    Args:
        num_nodes: nodes of the graph ``N``.
        targets: int64 ``[C]`` the target-type nodes (the catalogue the pool draws from).
        examples: the training examples (their positives give ``n_i`` and ``p_b``).
        alpha: popularity exponent ``α`` of the pool.
    """

    def __init__(self, num_nodes: int, targets: torch.Tensor, examples: CausalExamples, alpha: float = 0.75):
        if targets.numel() == 0:
            raise ValueError("no target nodes to draw candidates from")
        self.targets = targets.long()
        self.positive_prob = examples.positive_share(num_nodes)
        mass = (torch.bincount(examples.positive, minlength=num_nodes)[self.targets].double() + 1) ** alpha
        self.pool_cumulative = torch.cumsum(mass / mass.sum(), 0)
        self.pool_prob = torch.zeros(num_nodes, dtype=torch.float64)
        self.pool_prob[self.targets] = mass / mass.sum()

    def draw(self, size: int, generator: torch.Generator) -> torch.Tensor:
        """int64 ``[size]`` pool nodes drawn with replacement from ``q_pool``."""
        u = torch.rand(size, generator=generator, dtype=torch.float64) * self.pool_cumulative[-1]
        picks = torch.searchsorted(self.pool_cumulative, u, right=True).clamp_max(self.targets.numel() - 1)
        return self.targets[picks]

    def log_q(self, nodes: torch.Tensor, batch: int, pool: int) -> torch.Tensor:
        """``log(B · p_b(i) + M · q_pool(i))`` per node of ``nodes`` (float32, any shape).

        Args:
            nodes: int64 candidate nodes.
            batch: ``B``, the in-batch candidates per row.
            pool: ``M``, the pool candidates per row.
        """
        expected = batch * self.positive_prob[nodes] + pool * self.pool_prob[nodes]
        return torch.log(expected.clamp_min(1e-30)).float()
