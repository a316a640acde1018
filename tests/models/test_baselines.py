"""Each baseline beats random on a small planted data set; the interaction helpers are exact."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hir.models import baselines as b
from hir.models.metrics import pad_targets

CLUSTERS, PER_CLUSTER, USERS, LENGTH = 6, 20, 180, 9


def planted():
    """Users walk through their cluster's items in order (item k is followed by item k+1);
    clusters differ in size so popularity carries signal. Leave-one-out: the last item is the target."""
    rng = np.random.default_rng(0)
    cluster = rng.choice(CLUSTERS, USERS, p=[0.35, 0.25, 0.15, 0.1, 0.1, 0.05])
    start = rng.integers(0, PER_CLUSTER, USERS)
    seqs = [c * PER_CLUSTER + (s + np.arange(LENGTH)) % PER_CLUSTER for c, s in zip(cluster, start)]
    n_items = CLUSTERS * PER_CLUSTER

    def inter(cut):
        parts = [s[: LENGTH - cut] for s in seqs]
        return b.Interactions(np.repeat(np.arange(USERS), LENGTH - cut), np.concatenate(parts),
                              np.tile(np.arange(LENGTH - cut), USERS), USERS, n_items)

    def queries(back, history):
        indptr = np.arange(USERS + 1) * (LENGTH - 1 - back)
        indices = np.concatenate([s[: LENGTH - 1 - back] for s in seqs])
        return b.Queries(np.arange(USERS), pad_targets(np.array([s[-1 - back] for s in seqs])), history, indptr, indices)

    train, test_history = inter(2), inter(1)
    return train, queries(1, train), queries(0, test_history), cluster


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def data():
    return planted()


def recall(scorer, data):
    train, validation, test, _ = data
    scorer.fit(train, validation)
    return b.evaluate(scorer, test, ks=(10,))["recall@10"]


@pytest.fixture(scope="module")
def random_recall(data):
    return recall(b.RandomScorer(seed=0), data)


def item_cluster_vectors(rng):
    items = np.repeat(np.arange(CLUSTERS), PER_CLUSTER)
    return np.eye(CLUSTERS)[items] + 0.05 * rng.standard_normal((len(items), CLUSTERS))


@pytest.mark.parametrize("make", [
    lambda: b.PopularityScorer(),
    lambda: b.PopularityScorer(half_life=2.0),
    lambda: b.CooccurrenceScorer(),
    lambda: b.ALSScorer(factors=8, iterations=10),
    lambda: b.LightGCNScorer(dim=16, config=b.TrainConfig(lr=0.02, batch_size=512, max_epochs=8, patience=8)),
    lambda: b.SASRecScorer(b.SASRecConfig(max_len=10, hidden=32, dropout=0.1,
                                          train=b.TrainConfig(lr=5e-3, batch_size=32, max_epochs=25, patience=25))),
    lambda: b.TextScorer(item_cluster_vectors(np.random.default_rng(1))),
], ids=["popularity", "popularity_decayed", "cooccurrence", "als", "lightgcn", "sasrec", "text"])
def test_baseline_beats_random(make, data, random_recall):
    assert recall(make(), data) > 2 * random_recall


def test_sequential_baselines_learn_the_planted_order(data):
    # item k is always followed by k+1: the next-item models find it, a cluster-level model cannot
    assert recall(b.CooccurrenceScorer(), data) > 0.95
    sasrec = b.SASRecScorer(b.SASRecConfig(max_len=10, hidden=32, dropout=0.1,
                                           train=b.TrainConfig(lr=5e-3, batch_size=32, max_epochs=25, patience=5)))
    assert recall(sasrec, data) > 0.8
    assert 1 <= sasrec.epochs_run <= 25


def test_embedding_scorer_is_a_dot_product(data):
    train, _, test, cluster = data
    rng = np.random.default_rng(2)
    users = np.eye(CLUSTERS)[cluster]
    scorer = b.EmbeddingScorer(users, item_cluster_vectors(rng), name="planted")
    assert scorer.name == "planted"
    scores = scorer.score(np.array([0, 1]), test.history)
    assert torch.allclose(scores, torch.as_tensor(users[[0, 1]] @ item_cluster_vectors(np.random.default_rng(2)).T, dtype=torch.float32))
    assert recall(scorer, data) > 0.3


def test_prior_corrected_scorer_is_cosine_over_temperature_plus_log_prior():
    train = b.Interactions([0, 0, 1, 1, 1], [0, 1, 1, 1, 2], [0.0, 1.0, 0.0, 1.0, 2.0], 2, 4)
    users = np.array([[3.0, 0.0], [0.0, 1.0]])
    items = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 5.0], [1.0, 1.0]])
    scorer = b.PriorCorrectedScorer(users, items, temperature=0.5, name="hir").fit(train)
    cosine = torch.nn.functional.normalize(torch.tensor(users, dtype=torch.float32), dim=1) @ \
        torch.nn.functional.normalize(torch.tensor(items, dtype=torch.float32), dim=1).T
    prior = torch.log1p(torch.tensor([1.0, 3.0, 1.0, 0.0]))
    assert torch.allclose(scorer.score(np.array([0, 1]), train), cosine / 0.5 + prior)
    # items 0 and 1 point the same way: the more popular one ranks first; unseen item 3 stays finite
    assert scorer.score(np.array([0]), train)[0, 1] > scorer.score(np.array([0]), train)[0, 0]
    assert torch.isfinite(scorer.score(np.array([0]), train)).all()


def test_prior_corrected_scorer_decays_popularity():
    train = b.Interactions([0, 0, 0], [0, 0, 1], [0.0, 0.0, 10.0], 1, 2)
    same = np.ones((2, 2))
    recent = b.PriorCorrectedScorer(np.ones((1, 2)), same, temperature=0.1, half_life=1.0).fit(train)
    counted = b.PriorCorrectedScorer(np.ones((1, 2)), same, temperature=0.1).fit(train)
    assert recent.score(np.array([0]), train).argmax() == 1  # two old events weigh less than one new one
    assert counted.score(np.array([0]), train).argmax() == 0


def test_prior_corrected_scorer_queries_with_recent_items():
    history = b.Interactions([0, 0], [0, 1], [0.0, 1.0], 2, 3)  # user 0 took item 0, then item 1
    items = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    own = np.array([[1.0, 1.0], [3.0, 4.0]])
    scorer = b.PriorCorrectedScorer(own, items, temperature=1.0, recent_weights=(1.0, 0.5)).fit(history)
    query = scorer.query(np.array([0, 1]), history)
    assert torch.allclose(query[0], torch.nn.functional.normalize(torch.tensor([0.5, 1.0]), dim=0))  # 1·v̂₁ + 0.5·v̂₀
    assert torch.allclose(query[1], torch.tensor([0.6, 0.8]))  # no history: the user's own embedding


def test_engagement_rerank_orders_the_candidates_by_the_head_and_keeps_the_rest_below():
    train = b.Interactions([0], [0], [0.0], 2, 5)
    retrieve = b.EmbeddingScorer(np.eye(2), np.c_[np.arange(5, 0, -1), np.zeros(5)])  # item 0 ≻ 1 ≻ … for user 0

    class Head(torch.nn.Module):  # prefers the item with the largest last coordinate
        def forward(self, u, v, edge_type, age):
            assert u.shape == (2, 1, 5) and v.shape == (2, 3, 5) and edge_type.shape == age.shape == (2, 1)
            return v.argmax(dim=-1).float()

    scorer = b.EngagementRerankScorer(retrieve, np.eye(2, 5), np.eye(5), Head(), edge_type=3, candidates=3).fit(train)
    scores = scorer.score(np.array([0, 1]), train)
    assert torch.argsort(scores[0], descending=True).tolist() == [2, 1, 0, 3, 4]  # top 3 reversed, then 3, 4
    assert scores[0, :3].min() > scores[0, 3:].max()


def test_sasrec_item_table_starts_from_given_vectors_and_is_otherwise_the_plain_model():
    train = b.Interactions([0, 0, 0, 1, 1], [0, 1, 2, 1, 2], [0.0, 1.0, 2.0, 0.0, 1.0], 2, 4)
    config = b.SASRecConfig(max_len=4, hidden=4, layers=1)
    config.train.max_epochs = 0  # the starting tables, untrained
    init = np.zeros((4, 4))
    init[1] = [3.0, 0.0, 4.0, 0.0]  # item 1 has a representation, the others none
    started = b.SASRecScorer(config, item_init=init, name="hir_seq").fit(train).model.item.weight
    plain = b.SASRecScorer(config).fit(train).model.item.weight
    assert torch.allclose(started[2], torch.tensor([0.6, 0.0, 0.8, 0.0]))  # token = item + 1, unit row
    others = [0, 1, 3, 4]  # padding and the items without a vector keep the seeded random start
    assert torch.equal(started[others], plain[others]) and not torch.equal(started[2], plain[2])
    with pytest.raises(ValueError, match="item_init"):
        b.SASRecScorer(config, item_init=np.ones((4, 3))).fit(train)


def test_sequences_and_last_items_follow_time_then_input_order():
    inter = b.Interactions([1, 0, 1, 1, 0], [5, 6, 7, 8, 9], [2.0, 1.0, 1.0, 2.0, 0.0], 3, 10)
    indptr, items = inter.sequences()
    assert indptr.tolist() == [0, 2, 5, 5]
    assert items.tolist() == [9, 6, 7, 5, 8]
    assert b.last_items(inter, np.array([1, 2, 0]), 2).tolist() == [[5, 8], [-1, -1], [9, 6]]


def test_cooccurrence_weights_recent_items_most():
    # pairs: 0->1, 1->2, 3->4; a user with history [3, 0] (0 most recent) prefers 1 (weight 1) over 4 (0.5)
    train = b.Interactions([0, 0, 0, 1, 1], [0, 1, 2, 3, 4], [0, 1, 2, 0, 1], 3, 5)
    history = b.Interactions([2, 2], [3, 0], [0, 1], 3, 5)
    scores = b.CooccurrenceScorer(backoff=0.0).fit(train).score(np.array([2]), history)
    assert scores[0].tolist() == [0.0, 1.0, 0.0, 0.0, 0.5]
