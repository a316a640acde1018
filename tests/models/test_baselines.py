"""Each baseline beats random on a small planted data set; the interaction helpers are exact."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hir.models.baselines.als import ALSScorer
from hir.models.baselines.base import Interactions, RandomScorer, last_items
from hir.models.baselines.cooccurrence import CooccurrenceScorer
from hir.models.baselines.lightgcn import LightGCNScorer
from hir.models.baselines.neural import TrainConfig
from hir.models.baselines.popularity import PopularityScorer
from hir.models.baselines.sasrec import SASRecConfig, SASRecScorer
from hir.models.baselines.text_world_knowledge import TextScorer
from planted_interactions import item_cluster_vectors, planted, recall

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def data():
    return planted()


@pytest.fixture(scope="module")
def random_recall(data):
    return recall(RandomScorer(seed=0), data)


@pytest.mark.parametrize("make", [
    lambda: PopularityScorer(),
    lambda: PopularityScorer(half_life=2.0),
    lambda: CooccurrenceScorer(),
    lambda: ALSScorer(factors=8, iterations=10),
    lambda: LightGCNScorer(dim=16, config=TrainConfig(lr=0.02, batch_size=512, max_epochs=8, patience=8)),
    lambda: SASRecScorer(SASRecConfig(max_len=10, hidden=32, dropout=0.1,
                                          train=TrainConfig(lr=5e-3, batch_size=32, max_epochs=25, patience=25))),
    lambda: TextScorer(item_cluster_vectors(np.random.default_rng(1))),
], ids=["popularity", "popularity_decayed", "cooccurrence", "als", "lightgcn", "sasrec", "text"])
def test_baseline_beats_random(make, data, random_recall):
    assert recall(make(), data) > 2 * random_recall


def test_sequential_baselines_learn_the_planted_order(data):
    # item k is always followed by k+1: the next-item models find it, a cluster-level model cannot
    assert recall(CooccurrenceScorer(), data) > 0.95
    sasrec = SASRecScorer(SASRecConfig(max_len=10, hidden=32, dropout=0.1,
                                           train=TrainConfig(lr=5e-3, batch_size=32, max_epochs=25, patience=5)))
    assert recall(sasrec, data) > 0.8
    assert 1 <= sasrec.epochs_run <= 25


def test_sasrec_item_table_starts_from_given_vectors_and_is_otherwise_the_plain_model():
    train = Interactions([0, 0, 0, 1, 1], [0, 1, 2, 1, 2], [0.0, 1.0, 2.0, 0.0, 1.0], 2, 4)
    config = SASRecConfig(max_len=4, hidden=4, layers=1)
    config.train.max_epochs = 0  # the starting tables, untrained
    init = np.zeros((4, 4))
    init[1] = [3.0, 0.0, 4.0, 0.0]  # item 1 has a representation, the others none
    started = SASRecScorer(config, item_init=init, name="hir_seq").fit(train).model.item.weight
    plain = SASRecScorer(config).fit(train).model.item.weight
    assert torch.allclose(started[2], torch.tensor([0.6, 0.0, 0.8, 0.0]))  # token = item + 1, unit row
    others = [0, 1, 3, 4]  # padding and the items without a vector keep the seeded random start
    assert torch.equal(started[others], plain[others]) and not torch.equal(started[2], plain[2])
    with pytest.raises(ValueError, match="item_init"):
        SASRecScorer(config, item_init=np.ones((4, 3))).fit(train)


def test_sequences_and_last_items_follow_time_then_input_order():
    inter = Interactions([1, 0, 1, 1, 0], [5, 6, 7, 8, 9], [2.0, 1.0, 1.0, 2.0, 0.0], 3, 10)
    indptr, items = inter.sequences()
    assert indptr.tolist() == [0, 2, 5, 5]
    assert items.tolist() == [9, 6, 7, 5, 8]
    assert last_items(inter, np.array([1, 2, 0]), 2).tolist() == [[5, 8], [-1, -1], [9, 6]]


def test_cooccurrence_weights_recent_items_most():
    # pairs: 0->1, 1->2, 3->4; a user with history [3, 0] (0 most recent) prefers 1 (weight 1) over 4 (0.5)
    train = Interactions([0, 0, 0, 1, 1], [0, 1, 2, 3, 4], [0, 1, 2, 0, 1], 3, 5)
    history = Interactions([2, 2], [3, 0], [0, 1], 3, 5)
    scores = CooccurrenceScorer(backoff=0.0).fit(train).score(np.array([2]), history)
    assert scores[0].tolist() == [0.0, 1.0, 0.0, 0.0, 0.5]
