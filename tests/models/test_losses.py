"""Sinkhorn-Knopp balance, the two-level prototype losses and the collapse metrics."""

import math

import pytest
import torch
from hir.models.losses import (
    Prototypes,
    collapse_metrics,
    hierarchy_loss,
    sinkhorn,
    soft_cross_entropy,
    top_share,
    usage_entropy,
)


@pytest.mark.parametrize("batch,k", [(64, 8), (96, 48), (30, 7)])
def test_sinkhorn_rows_sum_to_one_and_columns_are_balanced(batch, k):
    g = torch.Generator().manual_seed(0)
    scores = torch.nn.functional.normalize(torch.randn(batch, 16, generator=g), dim=1) @ torch.nn.functional.normalize(
        torch.randn(k, 16, generator=g), dim=1
    ).T
    q = sinkhorn(scores, eps=0.05, iters=30)
    assert torch.allclose(q.sum(1), torch.ones(batch), atol=1e-5)
    assert torch.allclose(q.sum(0), torch.full((k,), batch / k), rtol=0.02)


def test_sinkhorn_balances_a_collapsed_teacher_and_survives_tiny_eps():
    # Every sample prefers prototype 0: the assignment still spreads mass evenly.
    scores = torch.zeros(40, 5)
    scores[:, 0] = 1.0
    q = sinkhorn(scores, eps=0.01, iters=3)
    assert torch.isfinite(q).all()
    assert torch.allclose(q.sum(0), torch.full((5,), 8.0), rtol=1e-3)


def test_sinkhorn_follows_the_scores():
    scores = torch.eye(4).repeat(8, 1)  # sample i prefers prototype i % 4
    q = sinkhorn(scores, eps=0.05, iters=3)
    assert (q.argmax(1) == torch.arange(32) % 4).all()


def test_soft_cross_entropy_is_minimised_by_matching_logits():
    q = torch.tensor([[0.7, 0.2, 0.1]])
    good = soft_cross_entropy(q, q.log())
    bad = soft_cross_entropy(q, torch.tensor([[0.0, 0.0, 5.0]]))
    assert good < bad
    assert math.isclose(float(good), float(-(q * q.log()).sum()), rel_tol=1e-5)


def test_prototype_assignment_nests_fine_in_coarse():
    torch.manual_seed(0)
    protos = Prototypes(dim=8, coarse=3, fine=9)
    coarse, fine = protos.assign(torch.randn(50, 8))
    parent = protos.hard_parent()
    has_children = torch.bincount(parent, minlength=3) > 0
    nested = parent[fine] == coarse
    assert nested[has_children[coarse]].all()
    assert torch.allclose(protos.parent_map().sum(1), torch.ones(9))


def test_hierarchy_loss_is_lower_when_levels_agree():
    parent = torch.zeros(4, 2)
    parent[[0, 1], 0] = 1.0
    parent[[2, 3], 1] = 1.0
    q_coarse = torch.tensor([[1.0, 0.0]])
    q_fine = torch.tensor([[0.5, 0.5, 0.0, 0.0]])
    consistent = hierarchy_loss(q_coarse, q_fine, torch.tensor([[0.95, 0.05]]), torch.tensor([[0.5, 0.45, 0.03, 0.02]]), parent)
    inconsistent = hierarchy_loss(q_coarse, q_fine, torch.tensor([[0.05, 0.95]]), torch.tensor([[0.02, 0.03, 0.5, 0.45]]), parent)
    assert consistent < inconsistent


def test_collapse_metrics_tell_balanced_from_collapsed():
    balanced = torch.arange(64) % 8
    collapsed = torch.zeros(64, dtype=torch.int64)
    assert usage_entropy(balanced, 8) == pytest.approx(1.0)
    assert usage_entropy(collapsed, 8) == pytest.approx(0.0)
    assert top_share(balanced, 8) == pytest.approx(1 / 8)
    assert top_share(collapsed, 8) == 1.0
    spread = collapse_metrics(balanced, balanced, 8, 8, torch.randn(64, 16))
    same = collapse_metrics(collapsed, collapsed, 8, 8, torch.ones(64, 16))
    assert spread["emb_std"] > 0.1 and same["emb_std"] == pytest.approx(0.0, abs=1e-6)


def test_info_nce_is_low_for_aligned_pairs_and_high_for_shuffled():
    from hir.models.losses import info_nce

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(32, 16, generator=gen)
    negatives = torch.randn(8, 16, generator=gen)
    aligned = info_nce(a, a + 0.01 * torch.randn(32, 16, generator=gen), negatives, 0.1)
    shuffled = info_nce(a, a[torch.randperm(32, generator=gen)], negatives, 0.1)
    assert aligned < 0.1 < math.log(40) / 2 < shuffled
