"""Inverted index: postings, typed weighted-overlap retrieval, re-rank and explanations."""

from __future__ import annotations

import pytest
import torch
from hir.models.index import InvertedIndex

TYPES = ["ad", "product", "user"]


@pytest.fixture(scope="module")
def bags():
    """60 entities with random bags of 4 tokens over 3 levels; types cycle ad, product, user."""
    g = torch.Generator().manual_seed(0)
    n = 60
    rows = torch.arange(n).repeat_interleave(4)
    tokens = torch.randint(3, (n * 4,), generator=g) * 1_000_000 + torch.randint(6, (n * 4,), generator=g)
    weights = torch.rand(n * 4, generator=g) + 0.1
    types = torch.arange(n) % 3
    index = InvertedIndex.build(rows, tokens, weights, torch.arange(n) + 1000, types, TYPES)
    dense = Dense(n)
    dense.matrix.index_put_((rows, dense.col(tokens)), weights, accumulate=True)
    return index, dense, types


class Dense:
    """Reference bag matrix ``[N, 3 levels × 6 codes]`` indexed by token id."""

    def __init__(self, n: int):
        self.matrix = torch.zeros(n, 18)
        self.shape = self.matrix.shape

    @staticmethod
    def col(tokens: torch.Tensor) -> torch.Tensor:
        return tokens // 1_000_000 * 6 + tokens % 1_000_000

    def token(self, cols: torch.Tensor) -> torch.Tensor:
        return cols // 6 * 1_000_000 + cols % 6

    def overlap(self, tokens: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        return self.matrix[:, self.col(tokens)] @ weights


def test_postings_are_sorted_compact_and_complete(bags):
    index, dense, _ = bags
    assert torch.all(index.tokens[1:] > index.tokens[:-1])
    assert index.offsets[-1] == index.rows.numel() == (dense.matrix > 0).sum()
    for row in range(dense.shape[0]):
        tokens, weights = index.bag(row)
        expected = dense.matrix[row].nonzero().squeeze(1)
        assert torch.equal(tokens.sort().values, dense.token(expected))
        assert torch.allclose(weights[tokens.argsort()], dense.matrix[row, expected])


def test_scores_equal_weighted_overlap(bags):
    index, dense, _ = bags
    q_tokens = torch.tensor([5, 1_000_002, 2_000_004, 7_000_000])  # the last token is unknown
    q_weights = torch.tensor([1.0, 0.5, 2.0, 9.0])
    expected = dense.overlap(q_tokens[:3], q_weights[:3])
    assert torch.allclose(index.scores(q_tokens, q_weights), expected)


def test_budget_scores_candidates_exactly(bags):
    index, dense, _ = bags
    q_tokens, q_weights = torch.tensor([5, 1_000_002, 2_000_004]), torch.tensor([1.0, 0.5, 2.0])
    rows, scores = index.candidates(q_tokens, q_weights, budget=1)
    assert rows.unique().numel() == rows.numel()
    assert torch.allclose(scores, dense.overlap(q_tokens, q_weights)[rows])


@pytest.mark.parametrize("entity_type", TYPES)
def test_search_returns_only_the_asked_type_best_first(bags, entity_type):
    index, dense, types = bags
    q_tokens, q_weights = torch.tensor([0, 1, 1_000_003, 2_000_001]), torch.ones(4)
    rows, scores = index.search(q_tokens, q_weights, k=5, entity_type=entity_type)
    assert rows.numel() > 0
    assert all(TYPES[int(types[r])] == entity_type for r in rows)
    assert torch.all(scores[:-1] >= scores[1:])
    full = dense.overlap(q_tokens, q_weights).masked_fill(types != TYPES.index(entity_type), 0)
    assert torch.allclose(scores, full.topk(rows.numel()).values)


def test_unknown_type_and_tokens_return_nothing(bags):
    index, *_ = bags
    assert index.search(torch.tensor([0]), torch.ones(1), 5, entity_type="brand")[0].numel() == 0
    assert index.search(torch.tensor([9_000_000]), torch.ones(1), 5)[0].numel() == 0


def test_rerank_orders_candidates_by_embedding_score(bags):
    index, dense, _ = bags
    vectors = torch.randn(dense.shape[0], 8, generator=torch.Generator().manual_seed(1))
    query = torch.randn(8, generator=torch.Generator().manual_seed(2))
    q_tokens, q_weights = torch.tensor([0, 1, 2, 3]), torch.ones(4)
    rows, scores = index.search(q_tokens, q_weights, 5, query_vector=query, vectors=vectors, candidates=20)
    matched = index.scores(q_tokens, q_weights).topk(20)
    pool = matched.indices[matched.values > 0]
    best = (vectors[pool] @ query).topk(min(5, pool.numel()))
    assert torch.equal(rows, pool[best.indices])
    assert torch.allclose(scores, best.values)


def test_explanation_contributions_sum_to_score(bags):
    index, dense, _ = bags
    q_tokens, q_weights = torch.tensor([0, 1, 1_000_003, 2_000_001]), torch.tensor([1.0, 2.0, 3.0, 4.0])
    rows, scores = index.search(q_tokens, q_weights, 3)
    for row, score in zip(rows.tolist(), scores.tolist()):
        parts = index.explain(q_tokens, q_weights, row)
        assert sum(c for _, c in parts) == pytest.approx(score, rel=1e-5)
        assert all(dense.matrix[row, dense.col(torch.tensor(t))] > 0 for t, _ in parts)


def test_rerank_of_the_whole_candidate_set_drops_repeated_rows(bags):
    index, dense, types = bags
    vectors = torch.randn(dense.shape[0], 8, generator=torch.Generator().manual_seed(3))
    query = torch.randn(8, generator=torch.Generator().manual_seed(4))
    q_tokens, q_weights = torch.tensor([0, 1, 1_000_003, 2_000_001]), torch.ones(4)
    matched = (index.scores(q_tokens, q_weights) > 0) & (types == 0)
    pool = matched.nonzero().squeeze(1)
    rows, scores = index.search(q_tokens, q_weights, 6, entity_type="ad", query_vector=query, vectors=vectors,
                                candidates=10_000)
    best = (vectors[pool] @ query).topk(6)
    assert torch.equal(rows, pool[best.indices])
    assert torch.allclose(scores, best.values)


@pytest.mark.parametrize("entity_type", [None, "product"])
def test_rerank_over_ivf_runs_multiplies_each_list_in_place_and_equals_exact_search(entity_type):
    # IVF layout: one token per row, rows stored in list order, so every posting list is a run of
    # consecutive rows (here 200 ≥ RUN_ROWS each); the re-rank must equal an exact search of those rows.
    n, lists = 1000, 5
    rows = torch.arange(n)
    tokens = rows // (n // lists)
    types = rows % 3
    index = InvertedIndex.build(rows, tokens, torch.ones(n), rows + 1000, types, TYPES)
    vectors = torch.randn(n, 8, generator=torch.Generator().manual_seed(5))
    query = torch.randn(8, generator=torch.Generator().manual_seed(6))
    q_tokens = torch.tensor([1, 3])
    found, scores = index.search(q_tokens, torch.ones(2), 10, entity_type=entity_type, query_vector=query,
                                 vectors=vectors, candidates=10_000)
    pool = torch.nonzero(torch.isin(tokens, q_tokens)).squeeze(1)
    if entity_type is not None:
        pool = pool[types[pool] == TYPES.index(entity_type)]
    best = (vectors[pool] @ query).topk(10)
    assert torch.equal(found, pool[best.indices])
    assert torch.allclose(scores, best.values)


@pytest.mark.parametrize("reversed_tokens", [False, True])
def test_rerank_over_short_disjoint_runs_gathers_them_once_and_equals_exact_search(reversed_tokens):
    # finest nested tokens: a few consecutive rows per token (< RUN_ROWS, so the rows are gathered);
    # with reversed token ids the lists do not follow row order and are put in it before the check
    n, per_list = 600, 3
    rows = torch.arange(n)
    tokens = rows // per_list
    if reversed_tokens:
        tokens = tokens.max() - tokens
    index = InvertedIndex.build(rows, tokens, torch.ones(n), rows + 1000, torch.zeros(n, dtype=torch.int64), ["item"])
    vectors = torch.randn(n, 8, generator=torch.Generator().manual_seed(7))
    query = torch.randn(8, generator=torch.Generator().manual_seed(8))
    q_tokens = torch.randperm(int(tokens.max()) + 1, generator=torch.Generator().manual_seed(9))[:40]
    found, scores = index.search(q_tokens, torch.ones(40), 25, query_vector=query, vectors=vectors, candidates=10_000)
    pool = torch.nonzero(torch.isin(tokens, q_tokens)).squeeze(1)
    best = (vectors[pool] @ query).topk(25)
    assert torch.equal(found, pool[best.indices])
    assert torch.allclose(scores, best.values)
