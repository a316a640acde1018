"""hir's scorers: the embedding dot product and its key alignment, the prior-corrected cosine, the
engagement re-ranking, and which scorer heads a report."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hir.evaluation.protocols import leave_last_out
from hir.evaluation.scorers import (
    EmbeddingScorer,
    EngagementRerankScorer,
    PriorCorrectedScorer,
    embedding_scorer,
    headline_scorer,
)
from hir.models.baselines.base import Interactions
from planted_interactions import CLUSTERS, item_cluster_vectors, planted, recall

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def data():
    return planted()


def test_embedding_scorer_is_a_dot_product(data):
    train, _, test, cluster = data
    rng = np.random.default_rng(2)
    users = np.eye(CLUSTERS)[cluster]
    scorer = EmbeddingScorer(users, item_cluster_vectors(rng), name="planted")
    assert scorer.name == "planted"
    scores = scorer.score(np.array([0, 1]), test.history)
    assert torch.allclose(scores, torch.as_tensor(users[[0, 1]] @ item_cluster_vectors(np.random.default_rng(2)).T, dtype=torch.float32))
    assert recall(scorer, data) > 0.3


def test_prior_corrected_scorer_is_cosine_over_temperature_plus_log_prior():
    train = Interactions([0, 0, 1, 1, 1], [0, 1, 1, 1, 2], [0.0, 1.0, 0.0, 1.0, 2.0], 2, 4)
    users = np.array([[3.0, 0.0], [0.0, 1.0]])
    items = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 5.0], [1.0, 1.0]])
    scorer = PriorCorrectedScorer(users, items, temperature=0.5, name="hir").fit(train)
    cosine = torch.nn.functional.normalize(torch.tensor(users, dtype=torch.float32), dim=1) @ \
        torch.nn.functional.normalize(torch.tensor(items, dtype=torch.float32), dim=1).T
    prior = torch.log1p(torch.tensor([1.0, 3.0, 1.0, 0.0]))
    assert torch.allclose(scorer.score(np.array([0, 1]), train), cosine / 0.5 + prior)
    # items 0 and 1 point the same way: the more popular one ranks first; unseen item 3 stays finite
    assert scorer.score(np.array([0]), train)[0, 1] > scorer.score(np.array([0]), train)[0, 0]
    assert torch.isfinite(scorer.score(np.array([0]), train)).all()


def test_prior_corrected_scorer_decays_popularity():
    train = Interactions([0, 0, 0], [0, 0, 1], [0.0, 0.0, 10.0], 1, 2)
    same = np.ones((2, 2))
    recent = PriorCorrectedScorer(np.ones((1, 2)), same, temperature=0.1, half_life=1.0).fit(train)
    counted = PriorCorrectedScorer(np.ones((1, 2)), same, temperature=0.1).fit(train)
    assert recent.score(np.array([0]), train).argmax() == 1  # two old events weigh less than one new one
    assert counted.score(np.array([0]), train).argmax() == 0


def test_prior_corrected_scorer_queries_with_recent_items():
    history = Interactions([0, 0], [0, 1], [0.0, 1.0], 2, 3)  # user 0 took item 0, then item 1
    items = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    own = np.array([[1.0, 1.0], [3.0, 4.0]])
    scorer = PriorCorrectedScorer(own, items, temperature=1.0, recent_weights=(1.0, 0.5)).fit(history)
    query = scorer.query(np.array([0, 1]), history)
    assert torch.allclose(query[0], torch.nn.functional.normalize(torch.tensor([0.5, 1.0]), dim=0))  # 1·v̂₁ + 0.5·v̂₀
    assert torch.allclose(query[1], torch.tensor([0.6, 0.8]))  # no history: the user's own embedding


def test_engagement_rerank_orders_the_candidates_by_the_head_and_keeps_the_rest_below():
    train = Interactions([0], [0], [0.0], 2, 5)
    retrieve = EmbeddingScorer(np.eye(2), np.c_[np.arange(5, 0, -1), np.zeros(5)])  # item 0 ≻ 1 ≻ … for user 0

    class Head(torch.nn.Module):  # prefers the item with the largest last coordinate
        def forward(self, u, v, edge_type, age):
            assert u.shape == (2, 1, 5) and v.shape == (2, 3, 5) and edge_type.shape == age.shape == (2, 1)
            return v.argmax(dim=-1).float()

    scorer = EngagementRerankScorer(retrieve, np.eye(2, 5), np.eye(5), Head(), edge_type=3, candidates=3).fit(train)
    scores = scorer.score(np.array([0, 1]), train)
    assert torch.argsort(scores[0], descending=True).tolist() == [2, 1, 0, 3, 4]  # top 3 reversed, then 3, 4
    assert scores[0, :3].min() > scores[0, 3:].max()


def test_embedding_scorer_aligns_by_key():
    split = leave_last_out(["u1", "u2"], [["1", "2", "3"], ["2", "3", "1"]])
    scorer = embedding_scorer(split, ["u2", "zz"], [[1.0, 0.0], [5.0, 5.0]],
                              ["3", "1"], [[2.0, 0.0], [0.0, 1.0]], name="hir")
    scores = scorer.score(np.array([0, 1]), split.test.history)
    keys = list(split.item_keys)
    assert scores[0].tolist() == [0.0, 0.0, 0.0]  # u1 has no vector
    assert scores[1, keys.index("3")].item() == 2.0 and scores[1, keys.index("2")].item() == 0.0
    assert scorer.name == "hir"


def test_headline_is_the_sequence_scorer_on_leave_last_out_only():
    rows = {"hir": {}, "hir_seq": {}}
    assert headline_scorer({"protocol": "leave_last_out"}, rows) == "hir_seq"
    assert headline_scorer({"protocol": "temporal"}, rows) == "hir"
    assert headline_scorer({"protocol": "leave_last_out"}, {"hir": {}}) == "hir"  # no SASRec run
