"""The item log prior as of a time: the decayed popularity of the past only, as scoring computes it."""

from __future__ import annotations

import torch
from hir.models.prior import CausalPopularity

HALF_LIFE = 5.0


def _brute(node, time, query_node, query_time, half_life):
    before = (node == query_node) & (time < query_time)
    decay = torch.ones_like(time) if half_life is None else torch.exp2(-(query_time - time) / half_life)
    return float(torch.log1p((decay * before).sum()))


def _events():
    g = torch.Generator().manual_seed(0)
    node = torch.randint(0, 6, (200,), generator=g)
    time = 1_700_000_000.0 + torch.randint(0, 100, (200,), generator=g).double()  # unix-sized times, with ties
    return node, time


def test_the_prior_counts_only_events_before_the_time():
    node, time = _events()
    queries = [(i, 1_700_000_000.0 + t) for i in range(7) for t in (-1.0, 0.0, 10.0, 50.5, 99.0, 250.0)]
    for half_life in (HALF_LIFE, None):
        prior = CausalPopularity(node, time, half_life)
        got = prior.log_prior(torch.tensor([q[0] for q in queries]), torch.tensor([q[1] for q in queries], dtype=torch.float64))
        expected = torch.tensor([_brute(node, time, i, t, half_life) for i, t in queries])
        assert torch.allclose(got, expected, rtol=1e-5, atol=1e-6), half_life


def test_a_later_event_changes_no_earlier_prior():
    node, time = _events()
    later = CausalPopularity(torch.cat([node, torch.tensor([2, 2])]), torch.cat([time, torch.tensor([1.7e9 + 60, 1.7e9 + 90], dtype=torch.float64)]), HALF_LIFE)
    nodes, times = torch.arange(6).unsqueeze(1), 1.7e9 + torch.tensor([[10.0, 60.0]], dtype=torch.float64)
    assert torch.equal(later.log_prior(nodes, times), CausalPopularity(node, time, HALF_LIFE).log_prior(nodes, times))


def test_a_row_of_times_against_a_row_of_nodes_broadcasts_as_the_trainer_asks():
    node, time = _events()
    node = torch.where(node == 3, 9, node)  # node 3 has no events, 9 is past the others
    nodes = torch.tensor([[0, 3, 5, 9, 12]])
    times = 1.7e9 + torch.tensor([[-1.0], [40.0], [99.5]], dtype=torch.float64)
    for half_life in (HALF_LIFE, None):
        got = CausalPopularity(node, time, half_life).log_prior(nodes, times)
        expected = torch.tensor([[_brute(node, time, int(i), float(t), half_life) for i in nodes[0]] for t in times[:, 0]])
        assert got.shape == (3, 5)
        assert torch.allclose(got, expected, rtol=1e-5, atol=1e-6), half_life
