"""Importance-sampled views of a :class:`~hir.models.graph.TemporalGraph`, batched in torch.

A *view* of an anchor is a token sequence — the anchor first — of the nodes that short random
walks with restart from the anchor land on most often (PinSage-style importance sampling), over
the snapshot's time-decayed edge weights. The walks run for the whole batch at once: a Python loop
runs over walk *steps*, never over anchors.

Causal views. Each anchor may carry its own time ``t ≤ cutoff`` (default: the cut-off). Its view
then sees only CSR entries with ``last_ts < t``: the CSR is time-sorted per node, so the usable
entries of a node are a prefix of its slice, found by one binary search per walker and step
(:class:`~hir.models.graph.TimeIndex`); a walker chooses only among them. Edge times are measured
from the view's time (``edge_dt = t − last_ts``) and, with explicit times, the node metadata is
recomputed as of ``t`` (:func:`~hir.models.graph.node_features_at`), so nothing at or after ``t``
can reach the view. An anchor may also name a node whose direct edges to it are removed from its
view (the pair's own edge of an item–item example): a step along such an entry fails.

Recency. With ``recent = R > 0`` the anchor's ``R`` newest usable entries before ``t`` (after
edge dropout and pair removal) bring their heads in as hop-1 tokens ahead of every walk-sampled
token, newest first, each by its newest entry; the walks fill the rest of the view.

Walk process (per anchor, ``walkers`` walkers in parallel, ``steps`` steps each). A walker at node
``u``, ``h`` hops from the anchor, first restarts at the anchor (``h ← 0``) with probability
``restart`` or when ``h = hops``; it then moves along an edge ``e`` of its current node chosen with
probability ``w_e / Σ_{e' ∈ out(u)} w_{e'}`` and records a visit of the edge's head at hop ``h + 1``.
A step that finds no edge (a node without usable edges, or an edge removed by edge dropout)
restarts the walker instead. Edge dropout removes each directed CSR entry from a view
independently with probability ``edge_dropout`` (a hash of the entry — its row and its place in
the row's time order, which later entries cannot shift — and a per-view salt from the generator,
so a removed entry stays removed for every walker of that view); rejected steps leave the walk's
relative choices among the remaining edges proportional to their weights.

Token selection. Let ``c(v)`` be the number of visits of ``v`` and ``m(v)`` its smallest visit
hop. The token's parent is the node the walker came from on its first lowest-hop visit (its hop is
``< m(v)``; a recency entry counts first), which gives a tree rooted at the anchor. Tokens are
ranked by the closed score ``s(v) = min(b(v), s(parent(v)))`` (the anchor has ``s = ∞``), then by
``m(v)``, then by node index, with ``b(v) = c(v)``, or ``walkers · steps + R − j`` for the head of
the anchor's ``j``-th newest entry (``j = 0 … R − 1``), above any visit count; the first ``tokens``
are kept. A parent always ranks before its children, so the kept set
is closed under parents and every token's path to the anchor lies inside the view.

Per token the view carries: node index, type, entity id, metadata, hop (depth in the view tree),
landing probability ``c(v) / (walkers · steps)`` (1 for the anchor), the edge that brought it in
(type, decayed weight, ``t − last_ts`` in seconds; the anchor gets the reserved edge type
``len(graph.edge_types)``), its parent's position and its ancestors by depth. Only edges with
``last_ts < cutoff`` and a positive finite weight exist to the sampler.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, fields

import torch
from hir.models.graph import TemporalGraph, TimeIndex, node_features_at
from hir.models.hashing import hash64, uniform_hash


@dataclass
class SamplerConfig:
    """Sizes and walk settings of the broad (teacher) and narrow (student) views.

    Attributes:
        broad_tokens: tokens per broad view, anchor included.
        broad_hops: the farthest hop a broad-view walker goes before it restarts.
        broad_walkers: parallel walkers per anchor for a broad view.
        broad_steps: steps per walker for a broad view (visits per anchor = walkers · steps).
        broad_edge_dropout: probability that an edge is removed from a broad view.
        narrow_tokens: tokens per narrow view, anchor included.
        narrow_hops: hops of a narrow view (1: the anchor's direct neighbours).
        narrow_walkers: parallel walkers per anchor for a narrow view.
        narrow_steps: steps per walker for a narrow view.
        edge_dropout: probability that an edge is removed from a narrow view.
        broad_recent: the anchor's newest entries that a broad view holds first (0: none).
        narrow_recent: the anchor's newest entries that a narrow view holds first (0: none).
        restart_prob: per-step probability that a walker jumps back to the anchor.
        threads: torch intra-op threads while sampling (restored afterwards); 0 leaves torch's
            setting. The walk is many small ops, where more threads mostly add synchronisation
            (on a loaded machine, one thread was ~10× faster than two).
    """

    broad_tokens: int = 128
    broad_hops: int = 3
    broad_walkers: int = 32
    broad_steps: int = 16
    broad_edge_dropout: float = 0.0
    narrow_tokens: int = 16
    narrow_hops: int = 1
    narrow_walkers: int = 16
    narrow_steps: int = 4
    edge_dropout: float = 0.2
    broad_recent: int = 0
    narrow_recent: int = 0
    restart_prob: float = 0.3
    threads: int = 1


@dataclass
class View:
    """A batch of views: tensors ``[B, S]`` unless noted, the anchor at position 0.

    Attributes:
        node: node index into the graph, -1 for padding.
        node_type: node type id (0 for padding).
        entity_id: warehouse entity id, hashed by the encoder (0 for padding).
        meta: ``[B, S, F]`` node metadata (``graph.node_features``, or as of the view's time when
            the views were sampled with times; zeros for padding).
        hop: depth in the view tree (0 for the anchor and padding).
        rw_prob: random-walk landing probability from the anchor (1 for the anchor, 0 for padding).
        edge_type: type of the edge that brought the token in; ``num_edge_types`` (reserved) for
            the anchor and padding.
        edge_weight: time-decayed weight of that edge (0 for the anchor and padding).
        edge_dt: ``t − last_ts`` of that edge in seconds, ``t`` the view's time (the cut-off by
            default; 0 for the anchor and padding).
        parent: position in the view of the token that brought this one in (-1 for the anchor
            and padding).
        ancestors: ``[B, S, max_depth + 1]`` position of the token's ancestor at each depth,
            itself at depth ``hop``, -1 below it and for padding.
        pad: True where the position is padding.
    """

    node: torch.Tensor
    node_type: torch.Tensor
    entity_id: torch.Tensor
    meta: torch.Tensor
    hop: torch.Tensor
    rw_prob: torch.Tensor
    edge_type: torch.Tensor
    edge_weight: torch.Tensor
    edge_dt: torch.Tensor
    parent: torch.Tensor
    ancestors: torch.Tensor
    pad: torch.Tensor

    @property
    def depth(self) -> torch.Tensor:
        """Depth in the view tree (the same as ``hop``)."""
        return self.hop

    @property
    def batch_size(self) -> int:
        return int(self.node.shape[0])

    @property
    def num_tokens(self) -> int:
        return int(self.node.shape[1])

    def to(self, device: torch.device | str) -> "View":
        """The same view with every tensor on ``device``."""
        return View(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})


def ancestors_from_parent(parent: torch.Tensor, depth: torch.Tensor, pad: torch.Tensor, max_depth: int) -> torch.Tensor:
    """``[B, S, max_depth + 1]`` ancestor positions from parent pointers.

    ``ancestors[b, i, depth[b, i]] = i`` and ``ancestors[b, i, d - 1] = parent[b, ancestors[b, i, d]]``;
    entries deeper than the token, and every entry of a padding token, are -1.

    Args:
        parent: ``[B, S]`` parent positions, -1 at the root and padding.
        depth: ``[B, S]`` depth of each token (root 0), at most ``max_depth``.
        pad: ``[B, S]`` True for padding.
        max_depth: the largest depth in the batch's view configuration.
    """
    batch, seq = parent.shape
    ancestors = torch.full((batch, seq, max_depth + 1), -1, dtype=torch.int64, device=parent.device)
    rows = torch.arange(batch, device=parent.device).unsqueeze(1).expand(batch, seq)
    cols = torch.arange(seq, device=parent.device).unsqueeze(0).expand(batch, seq)
    current = torch.where(pad, -1, cols)
    for _ in range(max_depth + 1):
        alive = current >= 0
        safe = current.clamp_min(0)
        level = depth.gather(1, safe).clamp(0, max_depth)
        ancestors[rows[alive], cols[alive], level[alive]] = current[alive]
        current = torch.where(alive, parent.gather(1, safe), -1)
    return ancestors


@contextlib.contextmanager
def _intra_op_threads(threads: int) -> Iterator[None]:
    """Run the block with ``threads`` torch intra-op threads (0: unchanged), then restore them."""
    previous = torch.get_num_threads()
    if threads > 0 and threads != previous:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)


def _kept(row: torch.Tensor, place: torch.Tensor, salt: torch.Tensor, edge_dropout: float) -> torch.Tensor:
    """Edge dropout: True where the entry at ``place`` in ``row``'s time order survives in the view of ``salt``."""
    return uniform_hash(place, hash64(row, salt)) >= edge_dropout


@dataclass
class _Visits:
    """Flat walk records: one entry per successful step, plus one hop-0 entry per anchor."""

    view: torch.Tensor  # which anchor of the batch
    node: torch.Tensor  # node visited
    hop: torch.Tensor  # hops from the anchor on this walk
    prev: torch.Tensor  # node the walker came from
    edge: torch.Tensor  # CSR entry traversed (-1 for the anchor entries)
    counted: torch.Tensor  # float: 1 for a step, 0 for an anchor or recency entry
    boost: torch.Tensor  # float: R − j for the anchor's j-th newest entry, 0 otherwise

    @staticmethod
    def cat(parts: list[_Visits]) -> _Visits:
        return _Visits(*(torch.cat([getattr(p, f.name) for p in parts]) for f in fields(_Visits)))


class ViewSampler:
    """Samples broad and narrow views of a batch of anchors from a snapshot.

    Args:
        graph: the snapshot; its merged symmetric CSR (time-sorted per node) is walked.
        config: view sizes and walk settings.
    """

    def __init__(self, graph: TemporalGraph, config: SamplerConfig | None = None):
        self.graph = graph
        self.config = config or SamplerConfig()
        csr = graph.csr
        self.indptr = csr.indptr
        self.indices = csr.indices
        self.edge_type = csr.edge_type
        self.last_ts = csr.last_ts
        self.weight = csr.weight
        self.num_nodes = graph.num_nodes
        self.anchor_edge_type = len(graph.edge_types)
        self.time_index = TimeIndex.of(csr)
        # An edge exists to the sampler only if it lies strictly before the cut-off with a usable weight.
        self.usable = (csr.last_ts < graph.cutoff) & torch.isfinite(csr.weight) & (csr.weight > 0)
        walk_weight = torch.where(self.usable, csr.weight.double(), 0.0)
        self.cum = torch.cumsum(walk_weight, 0)
        self.cum0 = torch.cat([self.cum.new_zeros(1), self.cum])

    def broad(
        self, anchors: torch.Tensor, generator: torch.Generator, times: torch.Tensor | None = None, exclude: torch.Tensor | None = None
    ) -> View:
        """Broad (teacher) views: ``broad_hops`` hops, ``broad_tokens`` tokens per anchor (see :meth:`sample`)."""
        c = self.config
        return self.sample(
            anchors, generator, c.broad_tokens, c.broad_hops, c.broad_walkers, c.broad_steps, c.broad_edge_dropout,
            times=times, exclude=exclude, recent=c.broad_recent,
        )

    def narrow(
        self, anchors: torch.Tensor, generator: torch.Generator, times: torch.Tensor | None = None, exclude: torch.Tensor | None = None
    ) -> View:
        """Narrow (student) views: ``narrow_hops`` hops, ``narrow_tokens`` tokens, edge dropout (see :meth:`sample`)."""
        c = self.config
        return self.sample(
            anchors, generator, c.narrow_tokens, c.narrow_hops, c.narrow_walkers, c.narrow_steps, c.edge_dropout,
            times=times, exclude=exclude, recent=c.narrow_recent,
        )

    def sample(
        self,
        anchors: torch.Tensor,
        generator: torch.Generator,
        tokens: int,
        hops: int,
        walkers: int,
        steps: int,
        edge_dropout: float,
        times: torch.Tensor | None = None,
        exclude: torch.Tensor | None = None,
        recent: int = 0,
    ) -> View:
        """Views of ``anchors`` (int64 ``[B]`` node indices) with the given sizes; see the module doc.

        Args:
            anchors: node indices of the anchors.
            generator: the only source of randomness, so a seed reproduces the views.
            tokens: tokens per view, anchor included.
            hops: farthest hop of a walker before it restarts.
            walkers: parallel walkers per anchor.
            steps: steps per walker.
            edge_dropout: probability that an edge is removed from a view.
            times: ``[B]`` unix seconds; anchor ``b``'s view holds only entries with
                ``last_ts < times[b]`` and its metadata as of then (clamped to the cut-off).
                ``None``: the cut-off, with the snapshot's metadata.
            exclude: ``[B]`` node indices; the entries between anchor ``b`` and ``exclude[b]`` are
                not in ``b``'s view (-1: none). ``None``: nothing removed.
            recent: the anchor's newest entries the view holds first (0: none).
        """
        anchors = anchors.to(torch.int64).reshape(-1)
        if anchors.numel() and (anchors.min() < 0 or anchors.max() >= self.num_nodes):
            raise ValueError(f"anchor indices must lie in [0, {self.num_nodes}); got [{int(anchors.min())}, {int(anchors.max())}]")
        limit = torch.full(anchors.shape, self.graph.cutoff, dtype=torch.float64)
        if times is not None:
            if bool(torch.isnan(times).any()):
                raise ValueError("view times must be numbers; got NaN")
            limit = torch.minimum(times.to(torch.float64).reshape(-1), limit)
        banned = None if exclude is None else exclude.to(torch.int64).reshape(-1)
        with _intra_op_threads(self.config.threads):
            salt = torch.randint(0, 1 << 31, (anchors.numel(),), generator=generator)
            rank = None if times is None else self.time_index.rank(limit)
            visits = self._walk(anchors, rank, banned, salt, generator, hops, walkers, steps, edge_dropout)
            if recent > 0 and self.indices.numel():
                visits = _Visits.cat([self._recent(anchors, limit, banned, salt, recent, edge_dropout), visits])
            return self._select(anchors, visits, tokens, hops, float(walkers * steps), limit, meta_as_of=times is not None)

    def _walk(
        self,
        anchors: torch.Tensor,
        rank: torch.Tensor | None,
        banned: torch.Tensor | None,
        salt: torch.Tensor,
        generator: torch.Generator,
        hops: int,
        walkers: int,
        steps: int,
        edge_dropout: float,
    ) -> _Visits:
        """Run ``walkers`` walkers per anchor for ``steps`` steps; return every successful step and
        one hop-0 entry per anchor. ``rank``: each anchor's time as :meth:`TimeIndex.rank`, or
        ``None`` for the cut-off (whose later entries carry no walk weight, so no search is needed)."""
        batch = anchors.numel()
        view = torch.arange(batch).repeat_interleave(walkers)
        start, salt = anchors[view], salt[view]
        until = None if rank is None else rank[view]
        start_end = None if rank is None else self.time_index.end_at_rank(anchors, rank)[view]
        other = None if banned is None else banned[view]
        current, hop = start.clone(), torch.zeros_like(start)
        records = []
        last_edge = max(self.indices.numel() - 1, 0)
        for _ in range(steps):
            draw = torch.rand(view.numel(), 2, generator=generator, dtype=torch.float64)
            restart = (draw[:, 0] < self.config.restart_prob) | (hop >= hops)
            current = torch.where(restart, start, current)
            hop = torch.where(restart, 0, hop)
            lo = self.indptr[current]
            end = self.indptr[current + 1] if until is None else self._end(current, start, start_end, until)
            base = self.cum0[lo]
            total = self.cum0[end] - base
            edge = torch.searchsorted(self.cum, base + draw[:, 1] * total, right=True)
            edge = torch.minimum(torch.maximum(edge, lo), end - 1).clamp(0, last_edge)
            ok = (total > 0) & self.usable[edge] if self.indices.numel() else torch.zeros_like(restart)
            if edge_dropout > 0:
                ok &= _kept(current, edge - lo, salt, edge_dropout)
            nxt = self.indices[edge] if self.indices.numel() else current
            if other is not None:
                ok &= ~(((current == start) & (nxt == other)) | ((current == other) & (nxt == start)))
            records.append((view[ok], nxt[ok], hop[ok] + 1, current[ok], edge[ok]))
            current = torch.where(ok, nxt, start)
            hop = torch.where(ok, hop + 1, 0)
        v, n, h, p, e = (torch.cat(parts) for parts in zip(*records)) if records else [torch.zeros(0, dtype=torch.int64)] * 5
        ids = torch.arange(batch)
        return _Visits(
            view=torch.cat([v, ids]),
            node=torch.cat([n, anchors]),
            hop=torch.cat([h, torch.zeros_like(ids)]),
            prev=torch.cat([p, anchors]),
            edge=torch.cat([e, torch.full_like(ids, -1)]),
            counted=torch.cat([torch.ones(v.numel(), dtype=torch.float64), torch.zeros(batch, dtype=torch.float64)]),
            boost=torch.zeros(v.numel() + batch, dtype=torch.float64),
        )

    def _end(self, current: torch.Tensor, start: torch.Tensor, start_end: torch.Tensor, until: torch.Tensor) -> torch.Tensor:
        """Each walker's end of usable entries at its current node; the anchor's is known, so only
        walkers away from it search."""
        end = start_end.clone()
        away = (current != start).nonzero(as_tuple=True)[0]
        end[away] = self.time_index.end_at_rank(current[away], until[away])
        return end

    def _recent(
        self, anchors: torch.Tensor, limit: torch.Tensor, banned: torch.Tensor | None, salt: torch.Tensor, recent: int, edge_dropout: float
    ) -> _Visits:
        """Hop-1 entries for each anchor's ``recent`` newest usable entries before its time, newest
        first, with boost ``recent − j`` for the ``j``-th newest."""
        batch = anchors.numel()
        back = torch.arange(recent)
        lo, end = self.indptr[anchors], self.time_index.end_before(anchors, limit)
        entry = end.unsqueeze(1) - 1 - back  # [B, R], newest first
        ok = entry >= lo.unsqueeze(1)
        entry = entry.clamp(0, self.indices.numel() - 1)
        ok &= self.usable[entry]
        if edge_dropout > 0:
            ok &= _kept(anchors.unsqueeze(1), entry - lo.unsqueeze(1), salt.unsqueeze(1), edge_dropout)
        node = self.indices[entry]
        if banned is not None:
            ok &= node != banned.unsqueeze(1)
        view = torch.arange(batch).unsqueeze(1).expand(batch, recent)
        return _Visits(
            view=view[ok],
            node=node[ok],
            hop=torch.ones(int(ok.sum()), dtype=torch.int64),
            prev=anchors.unsqueeze(1).expand(batch, recent)[ok],
            edge=entry[ok],
            counted=torch.zeros(int(ok.sum()), dtype=torch.float64),
            boost=(recent - back).double().expand(batch, recent)[ok],
        )

    def _select(
        self, anchors: torch.Tensor, visits: _Visits, tokens: int, hops: int, total_visits: float, limit: torch.Tensor, meta_as_of: bool
    ) -> View:
        """Aggregate visits per (view, node), build the tree, keep the top ``tokens`` per view."""
        n = self.num_nodes
        batch = anchors.numel()
        uniq, inv = torch.unique(visits.view * n + visits.node, return_inverse=True)
        count = torch.zeros(uniq.numel(), dtype=torch.float64).index_add_(0, inv, visits.counted)
        boost = torch.zeros(uniq.numel(), dtype=torch.float64).scatter_reduce_(0, inv, visits.boost, "amax")
        min_hop = torch.full((uniq.numel(),), hops + 1, dtype=torch.int64).scatter_reduce_(0, inv, visits.hop, "amin")
        # The first lowest-hop visit of each (view, node) defines its tree edge.
        order = visits.hop * visits.hop.numel() + torch.arange(visits.hop.numel())
        first = torch.full_like(min_hop, order.numel() * (hops + 2)).scatter_reduce_(0, inv, order, "amin")
        first = first % visits.hop.numel()
        view_of = uniq // n
        parent_u = torch.searchsorted(uniq, view_of * n + visits.prev[first])
        base = torch.where(boost > 0, total_visits + boost, count)
        score, depth = self._closed_score(base, min_hop, parent_u, hops)
        rank = self._rank(view_of, score, min_hop, batch)
        keep = rank < tokens
        return self._assemble(
            anchors, uniq, keep, rank, parent_u, depth, count / total_visits, visits.edge[first], tokens, hops, limit, meta_as_of
        )

    @staticmethod
    def _closed_score(base: torch.Tensor, min_hop: torch.Tensor, parent_u: torch.Tensor, hops: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``s(v) = min(b(v), s(parent(v)))`` with ``s(anchor) = ∞``, and the tree depth, level by level."""
        score = torch.where(min_hop == 0, torch.inf, base)
        depth = torch.zeros_like(min_hop)
        for level in range(1, hops + 1):
            at = (min_hop == level).nonzero(as_tuple=True)[0]
            score[at] = torch.minimum(base[at], score[parent_u[at]])
            depth[at] = depth[parent_u[at]] + 1
        return score, depth

    @staticmethod
    def _rank(view_of: torch.Tensor, score: torch.Tensor, min_hop: torch.Tensor, batch: int) -> torch.Tensor:
        """Rank within each view by score (descending), then min hop, then node index."""
        perm = torch.argsort(min_hop, stable=True)
        perm = perm[torch.argsort(-score[perm], stable=True)]
        perm = perm[torch.argsort(view_of[perm], stable=True)]
        starts = torch.cumsum(torch.bincount(view_of, minlength=batch), 0) - torch.bincount(view_of, minlength=batch)
        rank = torch.empty_like(perm)
        rank[perm] = torch.arange(perm.numel()) - starts[view_of[perm]]
        return rank

    def _assemble(
        self,
        anchors: torch.Tensor,
        uniq: torch.Tensor,
        keep: torch.Tensor,
        rank: torch.Tensor,
        parent_u: torch.Tensor,
        depth: torch.Tensor,
        rw_prob: torch.Tensor,
        edge: torch.Tensor,
        tokens: int,
        hops: int,
        limit: torch.Tensor,
        meta_as_of: bool,
    ) -> View:
        """Scatter the kept tokens into padded ``[B, tokens]`` tensors; metadata as of ``limit``
        when ``meta_as_of``, else the snapshot's."""
        g = self.graph
        batch = anchors.numel()
        b, slot = uniq[keep] // self.num_nodes, rank[keep]
        node_k = uniq[keep] % self.num_nodes
        is_anchor = edge[keep] < 0
        e = edge[keep].clamp_min(0)
        node = torch.full((batch, tokens), -1, dtype=torch.int64)
        node[b, slot] = node_k
        pad = node < 0
        safe = node.clamp_min(0)

        def scattered(values: torch.Tensor, fill: float | int, dtype: torch.dtype) -> torch.Tensor:
            out = torch.full((batch, tokens), fill, dtype=dtype)
            out[b, slot] = values.to(dtype)
            return out

        if self.indices.numel():
            etype = torch.where(is_anchor, self.anchor_edge_type, self.edge_type[e])
            eweight = torch.where(is_anchor, 0.0, self.weight[e].double())
            edt = torch.where(is_anchor, 0.0, limit[b] - self.last_ts[e])
        else:
            etype = torch.full_like(node_k, self.anchor_edge_type)
            eweight = edt = torch.zeros(node_k.numel(), dtype=torch.float64)
        parent = scattered(torch.where(is_anchor, -1, rank[parent_u[keep]]), -1, torch.int64)
        hop = scattered(depth[keep], 0, torch.int64)
        meta = node_features_at(g, self.time_index, safe, limit.unsqueeze(1)) if meta_as_of else g.node_features[safe]
        return View(
            node=node,
            node_type=torch.where(pad, 0, g.node_type[safe]),
            entity_id=torch.where(pad, 0, g.entity_id[safe]),
            meta=torch.where(pad.unsqueeze(-1), 0.0, meta),
            hop=hop,
            rw_prob=scattered(torch.where(is_anchor, 1.0, rw_prob[keep]), 0.0, torch.float32),
            edge_type=scattered(etype, self.anchor_edge_type, torch.int64),
            edge_weight=scattered(eweight, 0.0, torch.float32),
            edge_dt=scattered(edt, 0.0, torch.float32),
            parent=parent,
            ancestors=ancestors_from_parent(parent, hop, pad, hops),
            pad=pad,
        )
