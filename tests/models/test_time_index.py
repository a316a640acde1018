"""The time-sorted CSR: per-node binary search for entries before a time, and node metadata as of a time."""

from __future__ import annotations

import pytest
import torch
from hir.models.graph import (
    CSR,
    SECONDS_PER_DAY,
    TemporalGraph,
    TimeIndex,
    build_csr,
    node_features_at,
)

DAY = SECONDS_PER_DAY
CUTOFF = 30 * DAY


def _graph(seed: int = 0, nodes: int = 15, edges: int = 80) -> TemporalGraph:
    g = torch.Generator().manual_seed(seed)
    src, dst = torch.randint(0, nodes, (edges,), generator=g), torch.randint(0, nodes, (edges,), generator=g)
    ts = torch.randint(0, 30, (edges,), generator=g).double() * DAY  # whole days: many ties
    count = torch.randint(1, 5, (edges,), generator=g).float()
    csr = build_csr(nodes, src, dst, torch.zeros(edges, dtype=torch.long), torch.ones(edges), ts, count)
    age = torch.rand(nodes, generator=g) * 40 + 30  # every node older than the whole history
    return TemporalGraph(
        cutoff=CUTOFF, entity_id=torch.arange(nodes), node_type=torch.zeros(nodes, dtype=torch.long),
        node_features=torch.log1p(torch.stack([csr.degree().float(), age, torch.zeros(nodes)], 1)),
        node_types=["node"], edge_types=["e"], csr=csr,
    )


def test_build_csr_sorts_each_row_by_time():
    csr = _graph().csr
    assert csr.is_time_sorted()
    rows = csr.rows()
    assert bool((rows[1:] >= rows[:-1]).all())


def test_end_before_is_the_count_of_earlier_entries():
    graph = _graph()
    csr, index = graph.csr, TimeIndex.of(graph.csr)
    nodes = torch.arange(graph.num_nodes).repeat_interleave(7)
    times = torch.tensor([-1.0, 0.0, 0.5, 10.0, 10.5, 29.0, 40.0], dtype=torch.float64).repeat(graph.num_nodes) * DAY
    end = index.end_before(nodes, times)
    for node, t, e in zip(nodes.tolist(), times.tolist(), end.tolist()):
        lo, hi = int(csr.indptr[node]), int(csr.indptr[node + 1])
        assert e - lo == int((csr.last_ts[lo:hi] < t).sum())
        assert bool((csr.last_ts[lo:e] < t).all())


def test_an_unsorted_csr_is_refused():
    csr = CSR(indptr=torch.tensor([0, 2]), indices=torch.tensor([0, 0]), edge_type=torch.zeros(2, dtype=torch.long),
              weight=torch.ones(2), last_ts=torch.tensor([5.0, 1.0], dtype=torch.float64), count=torch.ones(2))
    with pytest.raises(ValueError, match="last_ts order"):
        TimeIndex.of(csr)


def test_node_features_at_use_only_the_past():
    graph = _graph()
    csr, index = graph.csr, TimeIndex.of(graph.csr)
    nodes = torch.arange(graph.num_nodes)
    t = 12.5 * DAY
    got = node_features_at(graph, index, nodes, torch.full((graph.num_nodes,), t, dtype=torch.float64))
    for node in nodes.tolist():
        lo, hi = int(csr.indptr[node]), int(csr.indptr[node + 1])
        ts, count = csr.last_ts[lo:hi], csr.count[lo:hi]
        degree = int((ts < t).sum())
        activity = float(count[(ts < t) & (ts >= t - 7 * DAY)].sum())
        age = float(torch.expm1(graph.node_features[node, 1])) - (CUTOFF - t) / DAY
        expected = torch.log1p(torch.tensor([degree, age, activity]))
        assert torch.allclose(got[node], expected, atol=1e-4), node
    at_cutoff = node_features_at(graph, index, nodes, torch.full((graph.num_nodes,), CUTOFF, dtype=torch.float64))
    assert torch.allclose(at_cutoff[:, :2], graph.node_features[:, :2], atol=1e-4)  # degree and age as the snapshot's
