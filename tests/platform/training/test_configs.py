"""The settings → training configs mapping: which representation paths a snapshot gets."""

from hir.models.planted import planted_events, snapshot_at
from hir.settings import Settings
from hir.training.configs import training_configs


def test_ids_are_pooled_with_or_without_world_knowledge_and_users_pool_their_direct_neighbours():
    graph, _ = snapshot_at(planted_events(users=20, items=10, events_per_user=3), 1_767_225_601.0)
    settings = Settings()
    for wk_dim in (0, 384):
        encoder = training_configs(settings, graph, wk_dim=wk_dim).encoder
        assert encoder.pooled_ids and encoder.pool_direct
    assert not training_configs(settings.replace(train_pooled_ids=False), graph, wk_dim=0).encoder.pooled_ids


def test_a_users_engagements_rank_by_recency_not_its_impressions():
    from types import SimpleNamespace

    from hir.training.configs import engagement_edge_types

    graph = SimpleNamespace(edge_types=["click", "followed_by", "impression", "purchase", "view"])
    assert engagement_edge_types(graph, "impression:0,view:0,click:1,purchase:4") == [0, 3]
    assert engagement_edge_types(graph, "impression:0,view:0") == [0, 1, 2, 3, 4]  # a log of views alone
    planted, _ = snapshot_at(planted_events(users=20, items=10, events_per_user=3), 1_767_225_601.0)
    encoder = training_configs(Settings().replace(train_funnel_weights="view:0,click:1"), planted).encoder
    assert [planted.edge_types[i] for i in encoder.recency_edge_types] == ["click"]
    assert encoder.recency_type == planted.node_types.index("user") and encoder.recency_weight == Settings().train_recency_pool


def test_training_settings_out_of_range_are_clear_errors():
    import pytest
    from hir.errors import SettingsError

    graph, _ = snapshot_at(planted_events(users=20, items=10, events_per_user=3), 1_767_225_601.0)
    with pytest.raises(SettingsError, match="HIR_TRAIN_RECENCY_POOL=-1"):
        training_configs(Settings().replace(train_recency_pool=-1.0), graph)
    with pytest.raises(SettingsError, match="HIR_TRAIN_RECENCY_HALF_RANK=0"):
        training_configs(Settings().replace(train_recency_half_rank=0.0), graph)
    assert training_configs(Settings().replace(train_recency_pool=0.0), graph).encoder.recency_weight == 0.0
    with pytest.raises(SettingsError, match="HIR_TRAIN_ID_LR_SCALE=0"):
        training_configs(Settings().replace(train_id_lr_scale=0.0), graph)
    assert training_configs(Settings().replace(train_id_lr_scale=4.0), graph).train.id_lr_scale == 4.0
    with pytest.raises(SettingsError, match="HIR_TRAIN_RESIDUAL_LR_SCALE=-1"):
        training_configs(Settings().replace(train_residual_lr_scale=-1.0), graph)
    residual = training_configs(Settings().replace(train_item_residual=True, train_residual_lr_scale=3.0), graph).train
    assert residual.item_residual and residual.residual_lr_scale == 3.0
    with pytest.raises(SettingsError, match="HIR_TRAIN_ITEM_CONTEXT=1 needs HIR_TRAIN_POOLED_IDS=1"):
        training_configs(Settings().replace(train_item_context=True, train_pooled_ids=False), graph)
    assert training_configs(Settings().replace(train_item_context=True), graph).train.item_context
    # the encoder's seed follows HIR_SEED unless HIR_TRAIN_SEED says otherwise (the data stays HIR_SEED's)
    assert training_configs(Settings().replace(seed=3), graph).train.seed == 3
    assert training_configs(Settings().replace(seed=3, train_seed=1), graph).train.seed == 1
    with pytest.raises(SettingsError, match="HIR_TRAIN_HASH_BUCKETS=0"):
        training_configs(Settings().replace(train_hash_buckets=0), graph)
    assert training_configs(Settings().replace(train_hash_buckets=1 << 18), graph).encoder.hash_buckets == 1 << 18
    with pytest.raises(SettingsError, match="HIR_TRAIN_CYCLES=0"):
        training_configs(Settings().replace(train_cycles=0), graph)
    with pytest.raises(SettingsError, match="HIR_TRAIN_HOLDOUT_USERS=-1"):
        training_configs(Settings().replace(train_holdout_users=-1), graph)
    train = training_configs(Settings().replace(train_cycles=3, train_holdout_users=50), graph).train
    assert (train.cycles, train.holdout_users) == (3, 50)
    with pytest.raises(SettingsError, match="HIR_TRAIN_PAIR_DROPOUT=1.5"):
        training_configs(Settings().replace(train_pair_dropout=1.5), graph)
    assert training_configs(Settings().replace(train_pair_dropout=0.5), graph).train.pair_dropout == 0.5
