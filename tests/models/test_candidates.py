"""Candidates for the sampled softmax: only target nodes, and log Q their expected count per row."""

from __future__ import annotations

import math

import torch
from hir.models.candidates import CandidateSampler
from hir.models.examples import CausalExamples


def _examples(positive: list[int]) -> CausalExamples:
    n = len(positive)
    return CausalExamples(torch.zeros(n, dtype=torch.long), torch.arange(n, dtype=torch.float64), torch.tensor(positive),
                          torch.zeros(n, dtype=torch.long), torch.ones(n))


def test_the_pool_draws_target_nodes_by_smoothed_popularity():
    examples = _examples([3, 3, 3, 5])  # node 4 is a target no example has engaged with yet
    sampler = CandidateSampler(8, torch.tensor([3, 4, 5]), examples, alpha=0.5)
    mass = torch.tensor([4.0, 1.0, 2.0]) ** 0.5
    assert torch.allclose(sampler.pool_prob[[3, 4, 5]], (mass / mass.sum()).double())
    draws = sampler.draw(20_000, torch.Generator().manual_seed(0))
    assert set(draws.unique().tolist()) == {3, 4, 5}
    share = torch.bincount(draws, minlength=8)[[3, 4, 5]].double() / draws.numel()
    assert torch.allclose(share, sampler.pool_prob[[3, 4, 5]], atol=0.01)


def test_log_q_makes_the_candidate_sum_an_unbiased_estimate_of_the_catalogue_sum():
    # E[Σ_candidates exp(z_j − log Q_j)] = Σ_catalogue exp(z_i) when Q is the expected count per row.
    targets = torch.arange(2, 12)
    examples = _examples([2] * 30 + [3] * 10 + [4, 5, 6, 7] * 2 + [11])
    sampler = CandidateSampler(12, targets, examples)
    z = torch.linspace(-1.0, 2.0, 12, dtype=torch.float64)
    batch, pool, trials = 8, 16, 4000
    gen = torch.Generator().manual_seed(0)
    total = 0.0
    for _ in range(trials):
        nodes = torch.cat([examples.draw(batch, gen).positive, sampler.draw(pool, gen)])
        total += float(torch.exp(z[nodes] - sampler.log_q(nodes, batch, pool).double()).sum())
    assert math.isclose(total / trials, float(torch.exp(z[targets]).sum()), rel_tol=0.03)
