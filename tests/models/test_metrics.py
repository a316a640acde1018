"""Full-ranking metrics against hand-computed cases, masking, ties and batching."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hir.models.metrics import (
    exclusion_mask,
    pad_targets,
    paired_bootstrap,
    per_query_metrics,
    query_means,
    ranking_metrics,
)


def test_single_target_hand_computed():
    scores = torch.tensor([[0.9, 0.8, 0.7, 0.1], [0.1, 0.2, 0.3, 0.4]])
    out = ranking_metrics(scores, torch.tensor([2, 3]), ks=(1, 3))
    # query 0: target at rank 3; query 1: target at rank 1
    assert out["recall@1"].tolist() == [0.0, 1.0]
    assert out["recall@3"].tolist() == [1.0, 1.0]
    assert out["ndcg@3"][0].item() == pytest.approx(1 / math.log2(4))
    assert out["ndcg@3"][1].item() == pytest.approx(1.0)
    assert out["mrr"].tolist() == pytest.approx([1 / 3, 1.0])


def test_several_targets_hand_computed():
    scores = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    out = ranking_metrics(scores, torch.tensor([[0, 3]]), ks=(2,))
    # targets at ranks 4 and 1: one of two found in the top 2
    assert out["recall@2"].item() == pytest.approx(0.5)
    assert out["ndcg@2"].item() == pytest.approx(1.0 / (1.0 + 1 / math.log2(3)))
    assert out["mrr"].item() == pytest.approx(1.0)


def test_ties_are_expected_over_a_random_order():
    scores = torch.tensor([[0.9, 0.5, 0.5, 0.1]])
    out = ranking_metrics(scores, torch.tensor([1]), ks=(2,))
    # target ties with one item after one better item: rank 2 or 3 with probability 1/2 each
    assert out["recall@2"].item() == pytest.approx(0.5)
    assert out["ndcg@2"].item() == pytest.approx(0.5 / math.log2(3))
    assert out["mrr"].item() == pytest.approx((1 / 2 + 1 / 3) / 2)
    flat = ranking_metrics(torch.zeros((1, 100)), torch.tensor([7]), ks=(10,))
    assert flat["recall@10"].item() == pytest.approx(0.1)


def test_masking_removes_items_and_masked_targets_miss():
    scores = torch.tensor([[0.9, 0.8, 0.7, 0.1]])
    exclude = torch.tensor([[True, True, False, False]])
    masked = ranking_metrics(scores, torch.tensor([2]), exclude, ks=(1,))
    assert masked["recall@1"].item() == 1.0
    missed = ranking_metrics(scores, torch.tensor([0]), exclude, ks=(4,))
    assert missed["recall@4"].item() == 0.0 and missed["mrr"].item() == 0.0


def test_a_querys_recall_is_the_mean_over_its_targets_split_in_parts():
    gen = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 20, (5, 300), generator=gen).float()
    many = torch.stack([torch.randperm(300, generator=gen)[:20] for _ in range(5)])
    by_sort = ranking_metrics(scores, many, ks=(10, 50))
    by_parts = [ranking_metrics(scores, many[:, :10], ks=(10, 50)), ranking_metrics(scores, many[:, 10:], ks=(10, 50))]
    recall = (by_parts[0]["recall@50"] + by_parts[1]["recall@50"]) / 2
    assert torch.allclose(by_sort["recall@50"], recall)


def _counted_one_by_one(scores, targets, exclude, k):
    """Recall@k and MRR of each row, counting every target's better and tied candidates in Python."""
    recall, mrr = [], []
    for row, wanted, masked in zip(scores.tolist(), targets.tolist(), exclude.tolist()):
        kept = [s for s, m in zip(row, masked) if not m]
        hits, reciprocal = [], []
        for item in [t for t in wanted if t >= 0]:
            if masked[item]:
                hits.append(0.0), reciprocal.append(0.0)
                continue
            greater, ties = sum(s > row[item] for s in kept), sum(s == row[item] for s in kept) - 1
            hits.append(min(max(k - greater, 0), ties + 1) / (ties + 1))
            reciprocal.append(sum(1 / p for p in range(greater + 1, greater + ties + 2)) / (ties + 1))
        recall.append(sum(hits) / len(hits)), mrr.append(max(reciprocal))
    return recall, mrr


def test_a_batch_of_one_and_many_target_queries_counts_each_as_one_by_one():
    gen = torch.Generator().manual_seed(3)
    scores = torch.randint(0, 12, (6, 200), generator=gen).float()  # many ties
    widths = [1, 2, 1, 7, 30, 2]  # the counting paths: comparison for one or two targets, a sort above
    targets = pad_targets([torch.randperm(200, generator=gen)[:w].tolist() for w in widths])
    targets[1, 0] = -1  # a padded slot before a target
    exclude = torch.rand((6, 200), generator=gen) < 0.05
    exclude[3, targets[3, 2]] = True  # an excluded target misses
    out = ranking_metrics(scores, targets, exclude, ks=(10,))
    recall, mrr = _counted_one_by_one(scores, targets, exclude, 10)
    assert out["recall@10"].tolist() == pytest.approx(recall)
    assert out["mrr"].tolist() == pytest.approx(mrr)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="finite"):
        ranking_metrics(torch.tensor([[float("nan"), 1.0]]), torch.tensor([0]))
    with pytest.raises(ValueError, match="at least one target"):
        ranking_metrics(torch.tensor([[0.0, 1.0]]), torch.tensor([[-1]]))


def test_exclusion_mask_and_batched_evaluation():
    indptr, indices = np.array([0, 2, 2, 3]), np.array([0, 3, 1])
    mask = exclusion_mask(indptr, indices, np.array([2, 0]), 4)
    assert mask.tolist() == [[False, True, False, False], [True, False, False, True]]
    gen = torch.Generator().manual_seed(1)
    scores = torch.rand((3, 4), generator=gen)
    targets = pad_targets([[2], [0, 1], [3]])
    one = query_means(per_query_metrics(lambda rows: scores[rows], targets, 4, indptr, indices, ks=(2,), batch_size=10))
    two = query_means(per_query_metrics(lambda rows: scores[rows], targets, 4, indptr, indices, ks=(2,), batch_size=1))
    assert one == pytest.approx(two) and one["queries"] == 3


def test_per_query_figures_are_the_means_parts():
    gen = torch.Generator().manual_seed(2)
    scores = torch.rand((7, 5), generator=gen)
    targets = pad_targets([[0], [1, 2], [4], [3], [0, 4], [2], [1]])
    per_query = per_query_metrics(lambda rows: scores[rows], targets, 5, ks=(2, 3), batch_size=3)
    means = query_means(per_query_metrics(lambda rows: scores[rows], targets, 5, ks=(2, 3), batch_size=7))
    assert means["queries"] == 7 and list(per_query) == ["recall@2", "ndcg@2", "recall@3", "ndcg@3", "mrr"]
    assert all(len(v) == 7 for v in per_query.values())
    assert {k: float(v.mean()) for k, v in per_query.items()} == pytest.approx({k: v for k, v in means.items() if k != "queries"})
    direct = ranking_metrics(scores, targets, ks=(2,))
    assert np.allclose(per_query["ndcg@2"], direct["ndcg@2"].numpy())


def test_the_paired_interval_covers_the_true_difference_and_cancels_what_queries_share():
    # Queries differ a lot in difficulty (shared by both scorers); scorer a hits 0.05 more often.
    rng = np.random.default_rng(0)
    truth, covered, widths = 0.05, 0, []
    for trial in range(40):
        difficulty = rng.uniform(0.0, 0.8, 2000)
        u = rng.uniform(size=2000)
        a, b = (u < difficulty + truth).astype(float), (u < difficulty).astype(float)
        low, high = paired_bootstrap(a, b, replicates=400, seed=trial)
        covered += low <= truth <= high
        widths.append(high - low)
        unpaired = 2 * 1.96 * np.sqrt(a.var() / len(a) + b.var() / len(b))
        assert high - low < unpaired / 2  # pairing removes the shared difficulty
    assert covered >= 34  # ≈ 95 % of 40 (38 expected)
    assert paired_bootstrap(a, a) == [0.0, 0.0]
    assert np.isnan(paired_bootstrap(np.zeros(0), np.zeros(0))).all()
