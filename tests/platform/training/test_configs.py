"""The settings → training configs mapping: which representation paths a snapshot gets."""

from hir.models.planted import planted_events, snapshot_at
from hir.settings import Settings
from hir.training.configs import training_configs


def test_ids_are_pooled_only_where_there_is_no_world_knowledge():
    graph, _ = snapshot_at(planted_events(users=20, items=10, events_per_user=3), 1_767_225_601.0)
    settings = Settings()
    assert training_configs(settings, graph, wk_dim=0).encoder.pooled_ids
    assert not training_configs(settings, graph, wk_dim=384).encoder.pooled_ids
    assert not training_configs(settings.replace(train_pooled_ids=False), graph, wk_dim=0).encoder.pooled_ids
