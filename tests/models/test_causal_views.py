"""Causal views: per-anchor time limits, the pair's own edge removed, recency-first tokens."""

from __future__ import annotations

import dataclasses

import torch
from hir.models.examples import next_engagement_examples
from hir.models.graph import TemporalGraph, build_csr
from hir.models.sampler import SamplerConfig, View, ViewSampler

CUTOFF = 100.0
SMALL = SamplerConfig(broad_tokens=12, broad_walkers=16, broad_steps=8, narrow_tokens=6, narrow_walkers=8,
                      narrow_steps=4, edge_dropout=0.3, broad_recent=4, narrow_recent=2)


def _graph(num_nodes: int, src, dst, ts, weight, node_type=None, etype=None) -> TemporalGraph:
    src, dst = torch.as_tensor(src), torch.as_tensor(dst)
    etype = torch.zeros_like(src) if etype is None else torch.as_tensor(etype)
    csr = build_csr(num_nodes, src, dst, etype, torch.as_tensor(weight, dtype=torch.float32),
                    torch.as_tensor(ts, dtype=torch.float64), torch.ones(src.numel()))
    age_and_activity = torch.rand(num_nodes, 2, generator=torch.Generator().manual_seed(9)) * 50
    return TemporalGraph(
        cutoff=CUTOFF,
        entity_id=torch.arange(num_nodes) + 1000,
        node_type=torch.zeros(num_nodes, dtype=torch.int64) if node_type is None else torch.as_tensor(node_type),
        node_features=torch.log1p(torch.cat([csr.degree().unsqueeze(1).float(), age_and_activity], 1)),  # as at the cut-off
        node_types=["user", "item"],
        edge_types=["view", "click"],
        csr=csr,
    )


def _random_edges(num_nodes: int, num_edges: int, seed: int, low: float, high: float):
    """Edges with dyadic weights (their sums are exact, so adding edges shifts no rounding)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_nodes, (num_edges,), generator=g)
    dst = torch.randint(0, num_nodes, (num_edges,), generator=g)
    ts = low + torch.rand(num_edges, generator=g, dtype=torch.float64) * (high - low)
    weight = torch.randint(1, 16, (num_edges,), generator=g).float() / 4
    return src, dst, ts, weight


def _views(sampler: ViewSampler, anchors, times, exclude=None) -> list[View]:
    broad = sampler.broad(anchors, torch.Generator().manual_seed(3), times=times, exclude=exclude)
    narrow = sampler.narrow(anchors, torch.Generator().manual_seed(4), times=times, exclude=exclude)
    return [broad, narrow]


def _same(a: View, b: View) -> bool:
    return all(torch.equal(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(View))


def test_a_planted_future_edge_changes_no_view():
    n = 30
    src, dst, ts, weight = _random_edges(n, 150, seed=0, low=0.0, high=90.0)
    anchors = torch.arange(12)
    times = 40.0 + torch.arange(12, dtype=torch.float64) * 2.5  # 40 … 67.5
    # Heavy edges from every anchor and everywhere else, at the latest view's time (not strictly
    # before it) or later: in the future of every view.
    f_src = torch.cat([anchors, torch.randint(0, n, (40,), generator=torch.Generator().manual_seed(1))])
    f_dst = torch.randint(0, n, (f_src.numel(),), generator=torch.Generator().manual_seed(2))
    f_ts = torch.cat([torch.full((12,), float(times.max())), torch.full((40,), 80.0)])
    planted = (torch.cat([src, f_src]), torch.cat([dst, f_dst]), torch.cat([ts, f_ts]), torch.cat([weight, torch.full((f_src.numel(),), 64.0)]))
    plain_sampler = ViewSampler(_graph(n, src, dst, ts, weight), SMALL)
    planted_sampler = ViewSampler(_graph(n, *planted), SMALL)

    for plain, with_future in zip(_views(plain_sampler, anchors, times), _views(planted_sampler, anchors, times)):
        assert _same(plain, with_future)
        real = ~plain.pad & (plain.parent >= 0)
        assert bool((plain.edge_dt[real] > 0).all())  # every edge strictly before its view's time
        assert bool((plain.edge_dt[real] <= times.float().unsqueeze(1).expand_as(real)[real]).all())
    # The planted edges are heavy enough to show up in views that may see them.
    late = torch.full((12,), CUTOFF, dtype=torch.float64)
    assert not _same(_views(plain_sampler, anchors, late)[0], _views(planted_sampler, anchors, late)[0])


def test_edge_time_is_measured_from_the_view_time():
    graph = _graph(3, [0, 0], [1, 2], [10.0, 30.0], [1.0, 1.0])
    view = ViewSampler(graph, SamplerConfig(broad_tokens=3)).broad(torch.tensor([0, 0]), torch.Generator().manual_seed(0),
                                                                    times=torch.tensor([20.0, 50.0], dtype=torch.float64))
    assert view.node[0].tolist() == [0, 1, -1]
    assert view.edge_dt[0, 1].item() == 10.0
    by_node = dict(zip(view.node[1].tolist(), view.edge_dt[1].tolist()))
    assert by_node[1] == 40.0 and by_node[2] == 20.0


def _tree_pairs(view: View, b: int) -> set[frozenset]:
    nodes, parent = view.node[b].tolist(), view.parent[b].tolist()
    return {frozenset((nodes[p], nodes[i])) for i, p in enumerate(parent) if p >= 0}


def test_the_pairs_own_edge_is_absent_from_both_views():
    n = 20
    src, dst, ts, weight = _random_edges(n, 60, seed=5, low=0.0, high=90.0)
    pairs = torch.tensor([[0, 1], [2, 3], [4, 5], [6, 7]])
    # Each pair's own edge is by far the heaviest edge of both ends.
    src, dst = torch.cat([src, pairs[:, 0]]), torch.cat([dst, pairs[:, 1]])
    ts, weight = torch.cat([ts, torch.full((4,), 50.0, dtype=torch.float64)]), torch.cat([weight, torch.full((4,), 64.0)])
    sampler = ViewSampler(_graph(n, src, dst, ts, weight), SMALL)
    anchors, partners = pairs.T.reshape(-1), pairs.flip(1).T.reshape(-1)

    for view in _views(sampler, anchors, None, exclude=partners):
        for b in range(anchors.numel()):
            assert frozenset((int(anchors[b]), int(partners[b]))) not in _tree_pairs(view, b)
    kept = _views(sampler, anchors, None)[0]
    assert all(frozenset((int(anchors[b]), int(partners[b]))) in _tree_pairs(kept, b) for b in range(anchors.numel()))


def test_next_engagement_views_never_hold_the_positive_edge():
    users, items = 6, 10
    g = torch.Generator().manual_seed(7)
    user = torch.arange(users).repeat_interleave(5)
    item = users + torch.stack([torch.randperm(items, generator=g)[:5] for _ in range(users)]).flatten()
    ts = torch.rand(user.numel(), generator=g, dtype=torch.float64) * 90
    graph = _graph(users + items, user, item, ts, torch.ones(user.numel()),
                   node_type=torch.cat([torch.zeros(users), torch.ones(items)]).long())
    examples = next_engagement_examples(graph, ["user"], ["item"], {"view": 1.0})
    assert len(examples) > 10
    sampler = ViewSampler(graph, dataclasses.replace(SMALL, broad_recent=8, edge_dropout=0.0))

    def positive_edges(view: View) -> int:
        return sum(frozenset((int(examples.anchor[b]), int(examples.positive[b]))) in _tree_pairs(view, b) for b in range(len(examples)))

    assert all(positive_edges(view) == 0 for view in _views(sampler, examples.anchor, examples.time))
    assert positive_edges(_views(sampler, examples.anchor, None)[0]) > 0  # at the cut-off the edge is there


def test_a_users_view_holds_its_most_recent_neighbours():
    # User 0 has 40 items; the older an edge, the heavier, so visit counts alone would keep old ones.
    items = 40
    ts = torch.arange(1, items + 1, dtype=torch.float64)
    graph = _graph(items + 1, [0] * items, list(range(1, items + 1)), ts, torch.linspace(8.0, 0.25, items))
    config = SamplerConfig(broad_tokens=11, broad_recent=10, narrow_tokens=6, narrow_recent=5, edge_dropout=0.0)
    sampler = ViewSampler(graph, config)
    anchors, times = torch.zeros(3, dtype=torch.long), torch.tensor([30.5, 30.5, 12.0], dtype=torch.float64)

    broad = sampler.broad(anchors, torch.Generator().manual_seed(0), times=times)
    assert broad.node[0, 1:].tolist() == list(range(30, 20, -1))  # newest first: items at t = 30 … 21
    assert broad.node[2, 1:].tolist() == list(range(11, 1, -1))
    assert torch.allclose(broad.edge_dt[0, 1:], (30.5 - torch.arange(30, 20, -1)).float())
    narrow = sampler.narrow(anchors, torch.Generator().manual_seed(0), times=times)
    assert narrow.node[0, 1:].tolist() == [30, 29, 28, 27, 26]
    by_visits = ViewSampler(graph, dataclasses.replace(config, broad_recent=0)).broad(anchors, torch.Generator().manual_seed(0), times=times)
    assert len(set(by_visits.node[0, 1:].tolist()) & set(range(21, 31))) < 5


def test_recency_respects_dropout_and_the_excluded_partner():
    graph = _graph(5, [0, 0, 0, 0], [1, 2, 3, 4], [1.0, 2.0, 3.0, 4.0], [1.0] * 4)
    sampler = ViewSampler(graph, SamplerConfig(narrow_tokens=5, narrow_recent=4, narrow_walkers=1, narrow_steps=1, edge_dropout=1.0))
    dropped = sampler.narrow(torch.tensor([0]), torch.Generator().manual_seed(0))
    assert dropped.node[0].tolist() == [0, -1, -1, -1, -1]
    no_dropout = dataclasses.replace(sampler.config, edge_dropout=0.0, narrow_walkers=1, narrow_steps=1, restart_prob=1.0)
    view = ViewSampler(graph, no_dropout).narrow(torch.tensor([0]), torch.Generator().manual_seed(0), exclude=torch.tensor([3]))
    assert view.node[0].tolist()[:4] == [0, 4, 2, 1]
