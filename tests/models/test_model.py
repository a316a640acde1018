"""HIRModel's pooled content and ids: walk weights, and for users the recency of their entries and
only what they engaged with."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from hir.models.encoder import EncoderConfig
from hir.models.model import HIRModel, ItemResidual, TrainConfig, encoder_config_for, pooling_weights, recency_entries, recency_ranks

USER, ITEM = 0, 1  # node types
CLICK, IMPRESSION = 0, 1  # edge types


def _view(anchor_type: int, ages: list[float], rw: list[float], edge_types: list[int] | None = None) -> SimpleNamespace:
    """One row: the anchor, hop-1 entries ``ages`` seconds old (landing probabilities ``rw``, clicks
    unless ``edge_types`` says otherwise), a hop-2 token and one padding position."""
    n = len(ages)
    hop = torch.tensor([[0] + [1] * n + [2, 0]])
    edge_types = [CLICK] * n if edge_types is None else edge_types
    return SimpleNamespace(
        hop=hop,
        edge_type=torch.tensor([[2] + edge_types + [CLICK, 2]]),
        pad=torch.tensor([[False] * (n + 2) + [True]]),
        edge_dt=torch.tensor([[0.0] + ages + [1.0, 0.0]], dtype=torch.float64),
        rw_prob=torch.tensor([[1.0] + rw + [0.05, 0.0]]),
        node_type=torch.tensor([[anchor_type] + [ITEM] * n + [USER, 0]]),
    )


def _config(weight: float = 4.0, half_rank: float = 1.0, direct: bool = False) -> EncoderConfig:
    """Users' clicks rank by recency; with ``direct`` users pool their hop-1 tokens only."""
    return EncoderConfig(dim=8, layers=1, heads=2, num_node_types=2, num_edge_types=2, recency_weight=weight,
                         recency_half_rank=half_rank, recency_type=USER, recency_edge_types=[CLICK], pool_direct=direct)


def test_recency_ranks_hop_one_tokens_newest_first():
    view = _view(USER, [30.0, 5.0, 60.0, 5.0], [0.1] * 4)
    ranks = recency_ranks(view, recency_entries(view, []))
    assert ranks[0, 1:5].tolist() == [2, 0, 3, 1]  # equal ages keep the view's order
    assert (ranks[0, [0, 5, 6]] >= 4).all()  # the anchor, hop 2 and padding after every hop-1 token


def test_only_engagements_rank_by_recency_when_their_types_are_given():
    view = _view(USER, [30.0, 1.0, 5.0, 60.0], [0.1] * 4, [CLICK, IMPRESSION, CLICK, CLICK])
    assert recency_ranks(view, recency_entries(view, [CLICK]))[0, [1, 3, 4]].tolist() == [1, 0, 2]  # the newer impression does not count
    assert recency_ranks(view, recency_entries(view, []))[0, 1:5].tolist() == [2, 0, 1, 3]
    extra = pooling_weights(view, _config(), (8.0, 1.0)) - pooling_weights(view, _config())
    assert torch.allclose(extra, torch.tensor([[0.0, 4.0, 0.0, 8.0, 2.0, 0.0, 0.0]]))


def test_a_users_newest_entries_weigh_more_by_half_a_rank_each():
    view = _view(USER, [30.0, 5.0, 60.0], [0.2, 0.1, 0.3])
    plain = torch.tensor([[2.0, 0.2, 0.1, 0.3, 0.05, 0.0]])  # the anchor: p = 1 plus hop 0
    assert torch.allclose(pooling_weights(view, _config()), plain)
    weights = pooling_weights(view, _config(), (8.0, 1.0))
    assert torch.allclose(weights - plain, torch.tensor([[0.0, 8.0 / 2, 8.0, 8.0 / 4, 0.0, 0.0]]))
    slower = pooling_weights(view, _config(), (8.0, 2.0)) - plain
    assert slower[0, 3].item() == pytest.approx(8.0 * 2 ** -1.0)  # third newest: 2^(-2/2)


def test_other_anchors_pool_by_the_walk_alone():
    view = _view(ITEM, [30.0, 5.0, 60.0], [0.2, 0.1, 0.3])
    assert torch.equal(pooling_weights(view, _config(), (8.0, 1.0)), pooling_weights(view, _config()))


def test_a_user_pools_only_its_direct_neighbours_with_pool_direct():
    view = _view(USER, [30.0, 5.0, 60.0], [0.2, 0.1, 0.3], [CLICK, IMPRESSION, CLICK])
    walk = pooling_weights(view, _config(), (8.0, 1.0))
    direct = pooling_weights(view, _config(direct=True), (8.0, 1.0))
    hop_one = torch.tensor([[False, True, True, True, False, False]])
    assert torch.equal(direct[hop_one], walk[hop_one])  # the impression keeps its walk weight, the clicks their recency
    assert direct[~hop_one].eq(0).all()  # not its own id, not the user two hops away
    item = _view(ITEM, [30.0, 5.0, 60.0], [0.2, 0.1, 0.3])
    assert torch.equal(pooling_weights(item, _config(direct=True), (8.0, 1.0)), pooling_weights(item, _config()))


def test_a_users_pooled_ids_are_those_of_its_direct_neighbours():
    torch.manual_seed(0)
    config = _config(direct=True)
    config.pooled_ids = True
    model = HIRModel(config, TrainConfig(proj_dim=8, coarse=2, fine=4), num_edge_types=2).eval()
    nn.init.ones_(model.id_norm.weight)
    view = _view(USER, [30.0, 5.0], [0.2, 0.1])
    view.entity_id = torch.tensor([[7, 11, 13, 17, 0]])
    other = SimpleNamespace(**vars(view))
    other.entity_id = torch.tensor([[8, 11, 13, 19, 0]])  # another user, another user two hops away
    assert torch.allclose(model.pooled_ids(view), model.pooled_ids(other))
    other.entity_id = torch.tensor([[7, 11, 14, 17, 0]])  # another item engaged with
    assert not torch.allclose(model.pooled_ids(view), model.pooled_ids(other))


def test_pooled_ids_start_silent_beside_world_knowledge():
    config = _config()
    config.pooled_ids = True
    alone = HIRModel(config, TrainConfig(proj_dim=8, coarse=2, fine=4), num_edge_types=2)
    config.wk_dim = 5
    beside = HIRModel(config, TrainConfig(proj_dim=8, coarse=2, fine=4), num_edge_types=2)
    assert alone.id_norm.weight.eq(1).all() and beside.id_norm.weight.eq(0).all()


def test_a_users_pooled_content_depends_on_the_order_of_its_entries_only_with_recency():
    torch.manual_seed(0)
    wk = torch.randn(1, 6, 5)
    has = torch.tensor([[False, True, True, True, False, False]])
    ages = [5.0, 30.0, 60.0]
    for weight, differ in ((0.0, False), (16.0, True)):
        config = _config(weight)
        config.wk_dim = 5
        model = HIRModel(config, TrainConfig(proj_dim=8, coarse=2, fine=4), num_edge_types=1).eval()
        forward = model.pooled_content(_view(USER, ages, [0.1] * 3), (wk, has))
        backward = model.pooled_content(_view(USER, ages[::-1], [0.1] * 3), (wk, has))
        assert (not torch.allclose(forward, backward, atol=1e-5)) is differ


def test_encoder_config_for_finds_the_users_type():
    graph = SimpleNamespace(node_types=["ad", "product", "user"], edge_types=["click"], node_features=torch.zeros(3, 3))
    assert encoder_config_for(graph, 16, 1, 2).recency_type == 2
    graph.node_types = ["item"]
    assert encoder_config_for(graph, 16, 1, 2).recency_type == -1


def test_a_config_written_before_recency_rebuilds_without_it():
    old = {k: v for k, v in _config(8.0, direct=True).to_dict().items() if not k.startswith(("recency", "pool_direct"))}
    assert EncoderConfig.from_dict(old).recency_weight == 0.0
    assert not EncoderConfig.from_dict(old).pool_direct


def test_the_recency_pooling_is_learnt_from_the_configs_start():
    torch.manual_seed(0)
    config = _config(8.0, half_rank=2.0)
    config.wk_dim = 5
    model = HIRModel(config, TrainConfig(proj_dim=8, coarse=2, fine=4), num_edge_types=2)
    rho, half_rank = model.recency()
    assert (rho.item(), half_rank.item()) == (pytest.approx(8.0), pytest.approx(2.0))
    wk, has = torch.randn(1, 6, 5), torch.tensor([[False, True, True, True, False, False]])
    pooled = model.pooled_content(_view(USER, [5.0, 30.0, 60.0], [0.1] * 3), (wk, has))
    (pooled * torch.randn(pooled.shape)).sum().backward()  # a LayerNorm's output sums to a constant
    assert model.log_recency.grad.abs().min() > 0
    off = HIRModel(_config(0.0), TrainConfig(proj_dim=8, coarse=2, fine=4), num_edge_types=2)
    assert off.recency() is None and "log_recency" not in dict(off.named_parameters())


def test_item_residual_adds_a_listed_items_own_vector_and_nothing_to_others():
    table = ItemResidual(3, 4)
    table.set_items(torch.tensor([30, 10, 20]))
    with torch.no_grad():
        table.weight.copy_(torch.arange(12, dtype=torch.float32).view(3, 4))
    out = table(torch.tensor([20, 5, 10, 99, 30]))
    assert torch.equal(out[[0, 2, 4]], table.weight[[1, 0, 2]])  # rows follow the sorted ids
    assert out[[1, 3]].eq(0).all()  # below the first id, past the last
    with pytest.raises(ValueError, match="2 items for a table of 3 rows"):
        table.set_items(torch.tensor([1, 2]))


def test_item_context_reaches_only_the_users_that_engaged_with_the_item():
    """A user's pooled ids move with the context vector of an item it engaged with (hop 1); the
    item's own pooled ids, and a user that reached the item only at hop 2, do not: the item scores
    what follows it without changing how it is scored itself."""
    config = dataclasses.replace(_config(direct=False), pooled_ids=True)
    model = HIRModel(config, TrainConfig(proj_dim=8, coarse=2, fine=4, item_context=True, residual_rows=2), num_edge_types=2)
    model.context.set_items(torch.tensor([11, 12]))

    def with_ids(view, ids):
        view.entity_id = torch.tensor([ids])
        return view

    user = with_ids(_view(USER, [5.0, 30.0], [0.3, 0.3]), [1, 11, 50, 12, 0])  # 12 reached at hop 2
    item = with_ids(_view(ITEM, [5.0, 30.0], [0.3, 0.3]), [11, 2, 3, 12, 0])
    before_user, before_item = model.pooled_ids(user), model.pooled_ids(item)
    with torch.no_grad():
        model.context.weight[1].normal_()  # item 12: in the item's view (hop 2) and the user's (hop 2)
    assert torch.equal(model.pooled_ids(user), before_user) and torch.equal(model.pooled_ids(item), before_item)
    with torch.no_grad():
        model.context.weight[0].normal_()  # item 11: the user's hop-1 entry, the item view's anchor
    assert not torch.allclose(model.pooled_ids(user), before_user)
    assert torch.equal(model.pooled_ids(item), before_item)
    assert [t is model.context for t in model.item_tables()] == [True]
