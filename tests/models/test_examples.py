"""Causal examples: user → next engaged item of the target type, funnel-weighted, in time order."""

from __future__ import annotations

import pytest
import torch
from hir.models.examples import (
    DEFAULT_FUNNEL_WEIGHTS,
    causal_examples,
    funnel_weights,
    next_engagement_examples,
    training_examples,
)
from hir.models.graph import TemporalGraph, build_csr

TYPES = ["view", "click", "purchase", "belongs_to"]


def _graph() -> TemporalGraph:
    # Users 0, 1; products 2, 3; an ad 4; a category 5.
    edges = [  # (src, dst, type, last_ts)
        (0, 2, 0, 10.0), (0, 2, 2, 10.0),  # viewed and bought product 2 at the same time
        (0, 3, 1, 20.0), (0, 4, 1, 5.0), (1, 2, 0, 30.0), (1, 3, 0, 1.0), (2, 5, 3, 0.5),
    ]
    src, dst, etype, ts = (torch.tensor(col) for col in zip(*edges))
    csr = build_csr(6, src, dst, etype, torch.ones(len(edges)), ts.double(), torch.ones(len(edges)))
    return TemporalGraph(
        cutoff=100.0, entity_id=torch.arange(6), node_type=torch.tensor([0, 0, 1, 1, 2, 3]),
        node_features=torch.zeros(6, 3), node_types=["user", "product", "ad", "category"], edge_types=TYPES, csr=csr,
    )


def test_user_to_next_product_with_funnel_weights_in_time_order():
    weights = {"view": 0.5, "click": 1.0, "purchase": 3.0}
    examples = next_engagement_examples(_graph(), ["user"], ["product"], weights, min_history=0)
    rows = list(zip(examples.anchor.tolist(), examples.time.tolist(), examples.positive.tolist(),
                    examples.event_type.tolist(), examples.weight.tolist()))
    # The view and the purchase of product 2 at t = 10 are one example, weighed as the purchase.
    assert rows == [(1, 1.0, 3, 0, 0.5), (0, 10.0, 2, 2, 3.0), (0, 20.0, 3, 1, 1.0), (1, 30.0, 2, 0, 0.5)]
    ads = next_engagement_examples(_graph(), ["user"], ["ad"], weights, min_history=0)
    assert ads.positive.tolist() == [4] and ads.time.tolist() == [5.0]


def test_an_example_needs_history_strictly_before_it():
    examples = next_engagement_examples(_graph(), ["user"], ["product"], {"view": 1.0, "click": 1.0, "purchase": 1.0})
    # User 1's view at t = 1 has nothing before it; user 0's engagement at t = 10 has the ad click at 5.
    assert list(zip(examples.anchor.tolist(), examples.time.tolist())) == [(0, 10.0), (0, 20.0), (1, 30.0)]


def test_unweighted_event_types_give_no_examples():
    examples = causal_examples(torch.tensor([0, 0, 1]), torch.tensor([5, 6, 5]), torch.tensor([0, 3, 1]),
                               torch.tensor([3.0, 2.0, 1.0]), funnel_weights(TYPES, {"view": 1.0, "click": 2.0}))
    assert examples.positive.tolist() == [5, 5] and examples.weight.tolist() == [2.0, 1.0]
    assert funnel_weights(TYPES, {"click": 2.0}).tolist() == [0.0, 2.0, 0.0, 0.0]


def test_unknown_node_types_are_refused():
    with pytest.raises(ValueError, match="advertiser"):
        next_engagement_examples(_graph(), ["user"], ["advertiser"])


def test_draw_and_positive_share():
    examples = next_engagement_examples(_graph(), ["user"], ["product"], min_history=0)
    share = examples.positive_share(6)
    assert share.tolist() == [0.0, 0.0, 0.5, 0.5, 0.0, 0.0]
    batch = examples.draw(5, torch.Generator().manual_seed(0))
    assert len(batch) == 5 and set(batch.positive.tolist()) <= {2, 3}


def test_views_are_context_by_default_targets_when_weighted_and_unweighted_logs_train_at_weight_one():
    assert DEFAULT_FUNNEL_WEIGHTS["impression"] == DEFAULT_FUNNEL_WEIGHTS["view"] == DEFAULT_FUNNEL_WEIGHTS["pv"] == 0
    order = ["view", "click", "fav", "cart", "purchase"]
    assert [DEFAULT_FUNNEL_WEIGHTS[name] for name in order] == sorted(DEFAULT_FUNNEL_WEIGHTS[name] for name in order)
    graph = _graph()
    examples, candidates = training_examples(graph, ["product"], DEFAULT_FUNNEL_WEIGHTS)
    # the default weights train on the click and the purchase; the views stay in the graph only
    assert sorted(zip(examples.positive.tolist(), examples.event_type.tolist())) == [(2, 2), (3, 1)]
    assert candidates.tolist() == [2, 3]
    examples, _ = training_examples(graph, ["product"], {**DEFAULT_FUNNEL_WEIGHTS, "view": 0.5})
    # weighted, user 1's later view trains too; the purchase outweighs the view at the same time
    assert sorted(zip(examples.positive.tolist(), examples.event_type.tolist(), examples.weight.tolist())) == [
        (2, 0, 0.5), (2, 2, 3.0), (3, 1, 1.0)]
    views_only = TemporalGraph(**{**vars(graph), "csr": build_csr(
        6, torch.tensor([0, 0, 1]), torch.tensor([2, 3, 3]), torch.zeros(3, dtype=torch.int64), torch.ones(3),
        torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64), torch.ones(3))})
    examples, _ = training_examples(views_only, ["product"], DEFAULT_FUNNEL_WEIGHTS)
    # a log of views alone trains user -> product on them at weight 1 (user 0's second view has history)
    assert list(zip(examples.anchor.tolist(), examples.positive.tolist(), examples.weight.tolist())) == [(0, 3, 1.0)]


def test_a_pass_counts_a_view_by_its_weight_and_only_clicks_and_deeper_are_engagements():
    examples = causal_examples(torch.tensor([0, 0, 1, 1]), torch.tensor([5, 6, 5, 7]), torch.tensor([0, 0, 1, 2]),
                               torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([0.5, 1.0, 3.0, 0.0]))
    assert examples.weight.tolist() == [0.5, 0.5, 1.0, 3.0]
    assert examples.pass_size() == 3.0  # two views at half an example each, a click, a purchase
    assert examples.engagements().tolist() == [False, False, True, True]
