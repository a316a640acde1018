"""The item log prior as of a time, from the past of that time only.

``π_i(t) = log(1 + n_i(t))`` with ``n_i(t) = Σ_{events e on i, t_e < t} 2^(−(t − t_e)/h)``: the
time-decayed popularity that :class:`~hir.models.baselines.PriorCorrectedScorer` adds to the
tempered cosine at scoring, there as of the cut-off, here as of any ``t`` — so a training example
at ``t`` gets the prior that scoring at ``t`` would give, and never counts its own or later events.
Without a half-life ``n_i(t)`` is the number of earlier events.

Events are sorted by ``(node, time)``. The decayed count just after event ``e``,
``d_e = Σ_{e' ≤ e, same node} 2^(−(t_e − t_e')/h)``, comes from one ``logcumsumexp`` over all
events in which each node's values are lifted far above every earlier node's (the earlier nodes
then add less than ``e^−50`` relatively); a query ``(i, t)`` finds ``i``'s last event before ``t``
by binary search and decays it: ``n_i(t) = d_e · 2^(−(t − t_e)/h)``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


class CausalPopularity:
    """``π_i(t)`` (module doc) for batches of ``(node, time)`` queries.

    Args:
        node: int64 ``[E]`` the item of each event.
        time: ``[E]`` unix seconds of each event.
        half_life: ``h`` in seconds; ``None`` counts events without decay.
    """

    def __init__(self, node: torch.Tensor, time: torch.Tensor, half_life: float | None):
        time = time.to(torch.float64)
        order = torch.argsort(time, stable=True)
        order = order[torch.argsort(node[order], stable=True)]
        self.node, self.time = node[order].long(), time[order]
        self.times, rank = torch.unique(self.time, sorted=True, return_inverse=True)
        self.key = self.node * (self.times.numel() + 1) + rank
        # where each node's events start in ``key`` (nodes past the last one start at the end)
        top = int(self.node.max()) + 1 if self.node.numel() else 0
        self.first = torch.searchsorted(self.key, torch.arange(top + 1) * (self.times.numel() + 1))
        self.rate = None if half_life is None else math.log(2.0) / half_life
        if self.rate is not None and self.node.numel():
            self.log_count = self._log_decayed_counts()

    def _log_decayed_counts(self) -> torch.Tensor:
        """``log d_e`` per sorted event (module doc)."""
        x = (self.time - self.time.max()) * self.rate  # ≤ 0
        lift = float(-x.min()) + 50.0
        segment = torch.cumsum(torch.cat([torch.ones(1, dtype=torch.bool), self.node[1:] != self.node[:-1]]).long(), 0) - 1
        shift = segment.double() * lift
        return torch.logcumsumexp(x + shift, 0) - shift - x

    def log_prior(self, nodes: torch.Tensor, times: torch.Tensor) -> torch.Tensor:
        """float32 ``π_i(t)`` for int64 ``nodes`` and unix-second ``times`` (broadcast together)."""
        times = times.to(torch.float64)
        if self.node.numel() == 0:
            return torch.zeros(torch.broadcast_shapes(nodes.shape, times.shape))
        # the time's rank before broadcasting: a [B, 1] column of times is searched B times, not B · C
        rank = torch.searchsorted(self.times, times.contiguous(), side="left")
        nodes, times, rank = torch.broadcast_tensors(nodes.long(), times, rank)
        end = torch.searchsorted(self.key, (nodes * (self.times.numel() + 1) + rank).contiguous(), side="left")
        if self.rate is None:
            start = self.first[nodes.clamp(0, self.first.numel() - 1)]
            return torch.log1p((end - start).double()).float()
        last = (end - 1).clamp_min(0)
        seen = (end > 0) & (self.node[last] == nodes)
        log_n = self.log_count[last] - (times - self.time[last]) * self.rate
        return torch.where(seen, F.softplus(log_n), 0.0).float()  # log(1 + e^log_n)
