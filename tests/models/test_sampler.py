"""View sampler: temporal cut-off, tree invariants, reproducibility, narrow views and edge dropout."""

from __future__ import annotations

import pytest
import torch
from hir.models.graph import TemporalGraph, build_csr
from hir.models.sampler import SamplerConfig, View, ViewSampler, ancestors_from_parent

CUTOFF = 100.0


def _graph(num_nodes: int, src, dst, etype, ts, weight=None, node_types: int = 2) -> TemporalGraph:
    src, dst = torch.as_tensor(src), torch.as_tensor(dst)
    weight = torch.ones(src.numel()) if weight is None else torch.as_tensor(weight, dtype=torch.float32)
    csr = build_csr(num_nodes, src, dst, torch.as_tensor(etype), weight, torch.as_tensor(ts, dtype=torch.float64), torch.ones(src.numel()))
    return TemporalGraph(
        cutoff=CUTOFF,
        entity_id=torch.arange(num_nodes) + 1000,
        node_type=torch.arange(num_nodes) % node_types,
        node_features=torch.arange(num_nodes * 3, dtype=torch.float32).view(num_nodes, 3),
        node_types=[f"t{i}" for i in range(node_types)],
        edge_types=["view", "click"],
        csr=csr,
    )


@pytest.fixture(scope="module")
def skewed() -> TemporalGraph:
    """300 nodes, 3000 edges with power-law sources, all before the cut-off."""
    g = torch.Generator().manual_seed(0)
    n, e = 300, 3000
    src = torch.multinomial(torch.arange(1, n + 1, dtype=torch.float64) ** -1.1, e, replacement=True, generator=g)
    dst = torch.randint(0, n, (e,), generator=g)
    ts = torch.rand(e, generator=g, dtype=torch.float64) * (CUTOFF - 1)
    return _graph(n, src, dst, torch.randint(0, 2, (e,), generator=g), ts, torch.rand(e, generator=g) + 0.01, node_types=3)


def _edges(graph: TemporalGraph) -> dict[tuple[int, int, int], set[float]]:
    """(src, dst, edge_type) → ``cutoff − last_ts`` of its parallel edges, over the symmetric CSR."""
    rows, cols = graph.csr.to_edge_list().tolist()
    out: dict[tuple[int, int, int], set[float]] = {}
    for r, c, t, ts in zip(rows, cols, graph.csr.edge_type.tolist(), graph.csr.last_ts.tolist()):
        out.setdefault((r, c, t), set()).add(CUTOFF - ts)
    return out


def test_never_uses_an_edge_at_or_after_the_cutoff():
    # 0-1 and 1-2 and 0-5 are before the cut-off; 0-3 is at it and 2-4 after it.
    graph = _graph(6, [0, 1, 0, 2, 0], [1, 2, 3, 4, 5], [0, 1, 0, 0, 1], [10.0, 20.0, CUTOFF, 150.0, 50.0])
    sampler = ViewSampler(graph, SamplerConfig(broad_tokens=8, broad_walkers=16, broad_steps=8))
    view = sampler.broad(torch.tensor([0, 2, 3, 4]), torch.Generator().manual_seed(1))
    nodes = [set(row) - {-1} for row in view.node.tolist()]
    assert nodes[0] == {0, 1, 2, 5}
    assert nodes[2] == {3} and nodes[3] == {4}  # their only edges are not in the past
    assert 4 not in nodes[1]
    real = ~view.pad & (view.parent >= 0)
    assert bool((view.edge_dt[real] > 0).all())
    assert set(view.edge_dt[real].tolist()) <= {CUTOFF - 10.0, CUTOFF - 20.0, CUTOFF - 50.0}


def test_view_is_a_tree_of_real_edges(skewed):
    cfg = SamplerConfig(broad_tokens=24, broad_hops=3)
    view = ViewSampler(skewed, cfg).broad(torch.arange(0, 300, 7), torch.Generator().manual_seed(2))
    edges = _edges(skewed)
    batch, seq = view.node.shape
    assert (batch, seq) == (43, 24) and view.meta.shape == (43, 24, 3) and view.ancestors.shape == (43, 24, 4)
    assert view.node[:, 0].tolist() == list(range(0, 300, 7))
    assert bool((view.hop[:, 0] == 0).all()) and bool((view.parent[:, 0] == -1).all())
    assert int(view.edge_type[:, 0].unique().item()) == len(skewed.edge_types)
    for b in range(batch):
        real = [i for i in range(seq) if not view.pad[b, i]]
        assert real == list(range(len(real)))  # padding only at the end
        assert len({int(view.node[b, i]) for i in real}) == len(real)
        for i in real[1:]:
            p = int(view.parent[b, i])
            assert 0 <= p < i and int(view.hop[b, i]) == int(view.hop[b, p]) + 1 <= cfg.broad_hops
            key = (int(view.node[b, p]), int(view.node[b, i]), int(view.edge_type[b, i]))
            assert min(abs(dt - float(view.edge_dt[b, i])) for dt in edges[key]) < 1e-3
            assert int(view.ancestors[b, i, int(view.hop[b, i])]) == i
            assert int(view.ancestors[b, i, int(view.hop[b, i]) - 1]) == p
    assert bool((view.rw_prob[~view.pad] > 0).all()) and bool((view.rw_prob <= 1).all())
    assert bool((view.meta[view.pad] == 0).all()) and bool((view.node[view.pad] == -1).all())
    assert int(view.hop.max()) >= 2


def test_frequent_neighbours_are_kept(skewed):
    # A star: node 0's edge to 1 carries almost all the weight, so 1 must be in every narrow view.
    graph = _graph(12, [0] * 11, list(range(1, 12)), [0] * 11, [5.0] * 11, [100.0] + [0.01] * 10)
    view = ViewSampler(graph, SamplerConfig(narrow_tokens=3, edge_dropout=0.0)).narrow(torch.zeros(4, dtype=torch.long), torch.Generator().manual_seed(0))
    assert view.node[:, 1].tolist() == [1, 1, 1, 1]
    assert bool((view.rw_prob[:, 1] > 0.5).all())


def test_reproducible_under_a_seed(skewed):
    sampler = ViewSampler(skewed)
    anchors = torch.arange(40)
    a = sampler.broad(anchors, torch.Generator().manual_seed(5))
    b = sampler.broad(anchors, torch.Generator().manual_seed(5))
    c = sampler.broad(anchors, torch.Generator().manual_seed(6))
    for name in View.__dataclass_fields__:
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert not torch.equal(a.node, c.node)


def test_narrow_views_and_edge_dropout(skewed):
    anchors = torch.arange(50)
    view = ViewSampler(skewed).narrow(anchors, torch.Generator().manual_seed(3))
    assert view.node.shape == (50, 16) and int(view.hop.max()) == 1
    assert bool((view.parent[~view.pad] <= 0).all())
    dropped = ViewSampler(skewed, SamplerConfig(edge_dropout=1.0)).narrow(anchors, torch.Generator().manual_seed(3))
    assert bool(dropped.pad[:, 1:].all()) and not bool(dropped.pad[:, 0].any())
    kept = ViewSampler(skewed, SamplerConfig(edge_dropout=0.0)).narrow(anchors, torch.Generator().manual_seed(3))
    assert int((~kept.pad).sum()) > int((~view.pad).sum()) > 50


def test_isolated_anchor_and_bad_anchor(skewed):
    graph = _graph(3, [0], [1], [0], [1.0])
    sampler = ViewSampler(graph)
    view = sampler.broad(torch.tensor([2, 0]), torch.Generator().manual_seed(0))
    assert view.node[0].tolist()[:2] == [2, -1] and view.node[1].tolist()[:3] == [0, 1, -1]
    with pytest.raises(ValueError, match="anchor indices"):
        sampler.broad(torch.tensor([3]), torch.Generator())


def test_ancestors_from_parent():
    # Tree 0 → {1, 2}, 1 → 3, 3 → 4; position 5 is padding.
    parent = torch.tensor([[-1, 0, 0, 1, 3, -1]])
    depth = torch.tensor([[0, 1, 1, 2, 3, 0]])
    pad = torch.tensor([[False] * 5 + [True]])
    anc = ancestors_from_parent(parent, depth, pad, 3)
    assert anc[0].tolist() == [[0, -1, -1, -1], [0, 1, -1, -1], [0, 2, -1, -1], [0, 1, 3, -1], [0, 1, 3, 4], [-1, -1, -1, -1]]
