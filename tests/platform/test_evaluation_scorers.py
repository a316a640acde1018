"""hir's scorers: the embedding dot product and its key alignment, the prior-corrected cosine, the
engagement re-ranking, the starting tables of hir_seq and its controls, and which scorer heads a report."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hir.evaluation.protocols import Split, leave_last_out
from hir.evaluation.scorers import (
    HEADLINE_RULE,
    HEADLINE_SCORER,
    TEMPERATURE_SCALES,
    BagScorer,
    EmbeddingScorer,
    EngagementRerankScorer,
    PriorCorrectedScorer,
    embedding_scorer,
    hir_item_table,
    sasrec_config,
    sequence_family,
    text_start,
    tuning_queries,
)
from hir.models.baselines.als import ALSScorer
from hir.models.baselines.base import Interactions, Queries
from hir.models.metrics import pad_targets
from hir.models.baselines.sasrec import SASRecScorer
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


def _popular_decoy():
    """Item 0 is popular (20 takes), item 1 is user 0's validation item; item 2 is neither."""
    train = Interactions([1] * 20 + [1], [0] * 20 + [1], np.arange(21.0), 2, 3)
    validation = Queries(np.array([0]), pad_targets(np.array([1])), train)
    towards = {item: np.eye(3)[item][None].repeat(2, 0) for item in range(3)}  # both users along item `item`
    return train, validation, towards, np.eye(3)


def test_the_validated_temperature_trusts_an_embedding_that_ranks_validation_above_the_prior():
    train, validation, towards, items = _popular_decoy()
    scorer = PriorCorrectedScorer(towards[1], items, 0.5, validation_vectors=(towards[1], items),
                                  validation_queries=validation).fit(train, validation)
    # cos 1 against the decoy's log(21) − log(2) = 2.35 of prior: T < 0.43 puts item 1 first
    assert scorer.temperature == pytest.approx(0.5 * 0.7071) and scorer.fit_report == {"temperature": scorer.temperature}
    assert int(scorer.score(np.array([0]), train).argmax()) == 1
    kept = PriorCorrectedScorer(towards[1], items, 0.5).fit(train, validation)  # nothing to tune on: T stays
    assert kept.temperature == 0.5 and kept.fit_report == {"temperature": 0.5}


def test_the_validated_temperature_is_chosen_with_the_validation_vectors_not_the_serving_ones():
    train, validation, towards, items = _popular_decoy()
    # serving vectors that have seen the validation item point at it; the unseen ones point at item 2
    scorer = PriorCorrectedScorer(towards[1], items, 0.5, validation_vectors=(towards[2], items),
                                  validation_queries=validation).fit(train, validation)
    assert scorer.temperature >= 0.5
    assert sorted(TEMPERATURE_SCALES) == list(TEMPERATURE_SCALES) and min(TEMPERATURE_SCALES) < 1 < max(TEMPERATURE_SCALES)


def test_a_bag_scorer_validates_its_temperature_only_when_asked():
    import scipy.sparse as sp

    train, validation, _, _ = _popular_decoy()
    bags = sp.csr_matrix(np.eye(3))
    # both users reach the decoy (overlap 0.3) and item 1 (overlap 1): item 1 first needs 0.7 / τ > log(21) − log(2)
    users = sp.csr_matrix(np.array([[0.3, 1.0, 0.0], [0.3, 1.0, 0.0]]))
    assert BagScorer(users, bags, 0.5).fit(train, validation).temperature == 0.5
    assert BagScorer(users, bags, 0.5, validation_queries=validation).fit(train, validation).temperature < 0.3


def test_a_bag_scorer_validates_with_the_validation_bags_not_the_serving_ones():
    import scipy.sparse as sp

    train, validation, _, _ = _popular_decoy()
    bags = sp.csr_matrix(np.eye(3))
    seen = sp.csr_matrix(np.array([[0.3, 1.0, 0.0]] * 2))  # serving bags that saw the validation item
    unseen = sp.csr_matrix(np.array([[0.3, 0.0, 1.0]] * 2))  # bags made at the cut-off point elsewhere
    fitted = BagScorer(seen, bags, 0.5, validation_queries=validation, validation_bags=unseen).fit(train, validation)
    assert fitted.temperature >= 0.5  # with the serving bags it would fall below 0.3 (the test above)
    assert fitted.user_bags is not unseen and (fitted.user_bags != seen).nnz == 0


def test_a_bag_scorer_ranks_only_what_the_tokens_reach_above_the_rest():
    """As the index does: an item no token of the user's bag reaches comes after every reached item,
    however popular; among the unreached, the prior orders."""
    import scipy.sparse as sp

    train, _, _, _ = _popular_decoy()  # item 0 holds 20 of the 21 takes
    users = sp.csr_matrix(np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]))  # user 1's bag is empty
    scores = BagScorer(users, sp.csr_matrix(np.eye(3)), 100.0).fit(train).score(np.array([0, 1]), train)
    assert scores[0].argsort(descending=True).tolist() == [2, 0, 1]  # overlap 0.01 + log(1) beats log(21)
    assert scores[1].argsort(descending=True).tolist() == [0, 1, 2]  # nothing reached: popularity


def test_the_temperature_is_tuned_on_the_queries_given_not_on_the_fit_validation():
    """On a temporal split the fit's validation queries lie inside the embeddings' history; the
    window after the cut-off is what the temperature is chosen on."""
    train, validation, towards, items = _popular_decoy()
    elsewhere = Queries(np.array([0]), pad_targets(np.array([0])), train)  # the window's target: the popular item
    scorer = PriorCorrectedScorer(towards[1], items, 0.5, validation_vectors=(towards[1], items),
                                  validation_queries=elsewhere).fit(train, validation)
    assert scorer.temperature >= 0.5  # the prior is trusted, though the fit's validation wanted T < 0.43


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
    assert scorer.fit_report == {}  # the plain retrieval stage chose nothing
    prior = PriorCorrectedScorer(np.eye(2), np.eye(5, 2), 0.25)
    assert EngagementRerankScorer(prior, np.eye(2, 5), np.eye(5), Head(), 3).fit(train).fit_report == {"temperature": 0.25}


def test_embedding_scorer_aligns_by_key():
    split = leave_last_out(["u1", "u2"], [["1", "2", "3"], ["2", "3", "1"]])
    scorer = embedding_scorer(split, ["u2", "zz"], [[1.0, 0.0], [5.0, 5.0]],
                              ["3", "1"], [[2.0, 0.0], [0.0, 1.0]], name="hir")
    scores = scorer.score(np.array([0, 1]), split.test.history)
    keys = list(split.item_keys)
    assert scores[0].tolist() == [0.0, 0.0, 0.0]  # u1 has no vector
    assert scores[1, keys.index("3")].item() == 2.0 and scores[1, keys.index("2")].item() == 0.0
    assert scorer.name == "hir"


def test_headline_is_hir_own_scorer_by_a_stated_rule():
    assert HEADLINE_SCORER == "hir" and "always hir's own" in HEADLINE_RULE and "hir_seq" in HEADLINE_RULE


def test_hir_item_table_is_the_cut_off_item_embeddings_in_split_order(tmp_path):
    import pandas as pd
    from hir.storage import Artifacts

    split = leave_last_out(["u1", "u2"], [["1", "2", "3"], ["2", "3", "1"]])
    artifacts = Artifacts(tmp_path)
    assert hir_item_table(split, artifacts, "2015-01-01") is None  # no entity embeddings
    path = artifacts.embeddings("2015-01-01")
    path.parent.mkdir(parents=True)
    pd.DataFrame({"entity_id": [0, 1, 2], "entity_type": ["product", "user", "product"], "source_key": ["i3", "u1", "i1"],
                  "embedding": [[1.0, 2.0], [9.0, 9.0], [3.0, 4.0]]}).to_parquet(path)
    table = hir_item_table(split, artifacts, "2015-01-01", lambda keys: np.array([f"i{k}" for k in keys]))
    keys = list(split.item_keys)
    assert table[keys.index("3")].tolist() == [1.0, 2.0] and table[keys.index("1")].tolist() == [3.0, 4.0]
    assert table[keys.index("2")].tolist() == [0.0, 0.0]  # no embedding: a zero row (the random start)


def test_text_start_keeps_the_geometry_of_the_items_with_text():
    rng = np.random.default_rng(0)
    text = rng.normal(size=(6, 3)) @ rng.normal(size=(3, 12))  # 12-d vectors in a 3-d subspace
    text[2] = 0.0  # no text
    start = text_start(text, 4)
    assert start.shape == (6, 4) and not start[2].any()
    present = [0, 1, 3, 4, 5]
    distances = lambda x: np.linalg.norm(x[present][:, None] - x[present][None], axis=-1)  # noqa: E731
    assert np.allclose(distances(start), distances(text), atol=1e-4)
    assert np.array_equal(text_start(text, 12), text.astype(np.float32))  # already at the width: as it is


def test_hir_seq_and_its_controls_start_alike_and_are_otherwise_the_plain_model():
    # training (all but each user's last two items) holds items 1, 2, 3; items 4, 5, 6 only later
    split = leave_last_out(["a", "b", "c"], [["1", "2", "3", "4"], ["2", "3", "4", "5"], ["1", "3", "2", "6"]])
    keys = list(split.item_keys)
    trained = [keys.index(k) for k in ("1", "2", "3")]
    width, rng = 4, np.random.default_rng(1)
    hir_items = rng.normal(size=(6, width))
    hir_items[keys.index("5")] = 0.0  # an item without a hir embedding
    text = rng.normal(size=(6, 10))
    text[keys.index("2")] = 0.0  # an item without text
    settings = type("Settings", (), {"threads": 1})()
    family_at, skipped = sequence_family(split, settings, seed=0, max_epochs=0, hir_items=hir_items, text=lambda: text)
    assert skipped == {}
    family = family_at(7)
    assert list(family) == ["sasrec", "hir_seq", "sasrec_text", "sasrec_als"]
    tables = {name: make().fit(split.train, split.validation).model.item.weight.detach()[1:] for name, make in family.items()}
    plain = SASRecScorer(sasrec_config(7, 0, width)).fit(split.train).model.item.weight.detach()[1:]
    assert tables["sasrec"].shape == (6, 64) and {t.shape for n, t in tables.items() if n != "sasrec"} == {(6, width)}
    unit = lambda x: torch.nn.functional.normalize(torch.as_tensor(x, dtype=torch.float32), dim=-1)  # noqa: E731
    als = ALSScorer(factors=width, seed=0, threads=1).fit(split.train).item_factors
    expected = {"hir_seq": (unit(hir_items), hir_items.any(axis=1)),
                "sasrec_text": (unit(text_start(text, width)), text.any(axis=1)),
                "sasrec_als": (unit(als), np.isin(np.arange(6), trained))}
    for name, (rows, has_vector) in expected.items():
        table = tables[name]
        assert torch.allclose(table[has_vector], rows[has_vector], atol=1e-6), name  # unit rows, as hir_seq's
        assert torch.allclose(table[has_vector].norm(dim=1), torch.ones(int(has_vector.sum()))), name
        assert torch.equal(table[~has_vector], plain[~has_vector]), name  # the plain model's seeded start
        assert not torch.equal(table[has_vector], plain[has_vector]), name
    assert family["sasrec_text"]().config.train.seed == 7 and family["sasrec_text"]().config.hidden == width


def test_sequence_family_without_hir_is_sasrec_alone_and_without_text_has_no_text_control():
    split = leave_last_out(["a", "b"], [["1", "2", "3", "4"], ["2", "3", "4", "1"]])
    settings = type("Settings", (), {"threads": 1})()
    family_at, skipped = sequence_family(split, settings, seed=0, max_epochs=1)
    assert list(family_at(0)) == ["sasrec"] and skipped == {}
    family_at, skipped = sequence_family(split, settings, seed=0, max_epochs=1, hir_items=np.ones((4, 8)))
    assert list(family_at(0)) == ["sasrec", "hir_seq", "sasrec_als"]
    assert skipped == {"sasrec_text": "the source has no item text"}


def test_tuning_queries_follow_the_protocol():
    history = Interactions([0], [0], [0.0], 1, 2)
    validation = Queries(np.array([0]), pad_targets(np.array([1])), history)
    window = Queries(np.array([0]), pad_targets(np.array([1])), history)
    split = Split(history, validation, validation, np.array(["a", "b"]), np.array(["u"]), info={"protocol": "temporal"})
    assert tuning_queries(split) is None  # the validation items lie before the cut-off: nothing to tune on
    assert tuning_queries(dataclasses.replace(split, window_validation=window)) is window
    assert tuning_queries(dataclasses.replace(split, info={"protocol": "leave_last_out"})) is validation
