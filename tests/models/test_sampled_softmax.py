"""The logQ-corrected sampled softmax: its formula, and that it ranks a tiny catalogue as the full softmax does."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hir.models.candidates import CandidateSampler
from hir.models.examples import CausalExamples
from hir.models.losses import sampled_softmax

pytestmark = pytest.mark.usefixtures("one_thread")
USERS, ITEMS, TEMPERATURE = 4, 20, 0.1


def test_with_the_whole_catalogue_it_is_the_full_softmax_plus_the_prior():
    g = torch.Generator().manual_seed(0)
    query, items = torch.randn(3, 8, generator=g), torch.randn(5, 8, generator=g)
    positive = torch.tensor([2, 0, 4])
    others = torch.tensor([i for i in range(5) if i not in positive.tolist()])
    order = torch.cat([positive, others])  # the positives first, then the rest of the catalogue once
    prior = torch.randn(5, generator=g)
    weight = torch.tensor([1.0, 3.0, 0.5])
    logits = F.normalize(query, dim=-1) @ F.normalize(items, dim=-1).T / TEMPERATURE + prior
    full = (weight * F.cross_entropy(logits, positive, reduction="none")).sum() / weight.sum()
    got = sampled_softmax(query, items[order], order, torch.zeros(5), TEMPERATURE, prior[order], weight)
    assert torch.allclose(got, full, atol=1e-5)


def test_a_repeated_positive_is_not_its_own_negative():
    query = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    candidates = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    nodes = torch.tensor([7, 7, 9])  # both rows engaged with item 7; item 9 is the only negative
    got = sampled_softmax(query, candidates, nodes, torch.zeros(3), 1.0)
    expected = -torch.log_softmax(torch.tensor([1.0, 0.0]), 0)[0]
    assert torch.allclose(got, expected)


def _data():
    g = torch.Generator().manual_seed(0)
    popularity = (torch.arange(ITEMS) + 1.0) ** -1.5
    logits = torch.log(popularity) + torch.randn(USERS, ITEMS, generator=g)
    users = torch.randint(0, USERS, (4000,), generator=g)
    items = torch.multinomial(torch.softmax(logits, -1)[users], 1, generator=g).squeeze(1)
    zeros = torch.zeros(users.numel())
    return CausalExamples(users, zeros.double(), items + USERS, zeros.long(), zeros + 1)


def _train(examples: CausalExamples, loss_of, steps: int = 300) -> torch.Tensor:
    """Free user and item vectors trained with ``loss_of(user vectors, item vectors, batch, generator)``."""
    torch.manual_seed(1)
    user, item = torch.nn.Parameter(torch.randn(USERS, ITEMS)), torch.nn.Parameter(torch.randn(ITEMS, ITEMS))
    optimizer = torch.optim.Adam([user, item], lr=0.05)
    gen = torch.Generator().manual_seed(2)
    for _ in range(steps):
        loss = loss_of(user, item, examples.draw(32, gen), gen)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return (F.normalize(user, dim=-1) @ F.normalize(item, dim=-1).T).detach()


def _spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    ra, rb = (x.argsort(-1).argsort(-1).float() for x in (a, b))
    ra, rb = ra - ra.mean(-1, keepdim=True), rb - rb.mean(-1, keepdim=True)
    return float(((ra * rb).sum(-1) / (ra.norm(dim=-1) * rb.norm(dim=-1))).mean())


def test_the_corrected_sampled_softmax_ranks_like_the_full_softmax():
    examples = _data()
    sampler = CandidateSampler(USERS + ITEMS, torch.arange(USERS, USERS + ITEMS), examples, alpha=1.0)

    def full(user, item, batch, gen):
        logits = F.normalize(user[batch.anchor], dim=-1) @ F.normalize(item, dim=-1).T / TEMPERATURE
        return F.cross_entropy(logits, batch.positive - USERS)

    def sampled(corrected: bool):
        def loss(user, item, batch, gen):
            nodes = torch.cat([batch.positive, sampler.draw(64, gen)])
            log_q = sampler.log_q(nodes, len(batch), 64) if corrected else torch.zeros(nodes.numel())
            return sampled_softmax(user[batch.anchor], item[nodes - USERS], nodes, log_q, TEMPERATURE)
        return loss

    reference = _train(examples, full)
    assert _spearman(_train(examples, sampled(True)), reference) > 0.85
    assert _spearman(_train(examples, sampled(False)), reference) < 0.7  # uncorrected: popular items sink
