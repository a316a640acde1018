"""Serving-time refresh: the trained encoder embeds a later snapshot without retraining, so a user
who engaged after the cut-off is served from a view that holds that engagement."""

import dataclasses

import pytest
import torch
from hir.models.checkpoint import load_model
from hir.models.inference import embed_all
from hir.models.model import TrainConfig, encoder_config_for
from hir.models.planted import planted_events, snapshot_at
from hir.models.sampler import SamplerConfig, ViewSampler
from hir.models.trainer import Trainer

SAMPLER = SamplerConfig(broad_tokens=24, broad_walkers=12, broad_steps=6, narrow_tokens=8, narrow_walkers=8, narrow_steps=3,
                        broad_recent=8, narrow_recent=4)
DAY = 86_400.0

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_user_who_engaged_yesterday_is_served_a_refreshed_embedding(tmp_path):
    events = planted_events(users=80, items=60, events_per_user=8, days=4.0)
    end = float(events.ts.max()) + 1
    cut, _ = snapshot_at(events, end - DAY)
    served, _ = snapshot_at(events, end)
    config = TrainConfig(steps=4, batch_size=16, coarse=4, fine=8, proj_dim=16, pool_size=32, warmup_steps=1)
    encoder = encoder_config_for(cut, dim=16, layers=1, heads=2, hash_buckets=2048, dropout=0.0)
    Trainer(cut, config, encoder, SAMPLER, tmp_path).fit()
    model = load_model(tmp_path, len(cut.edge_types))
    at_cutoff = embed_all(cut, model, SAMPLER, backend="dense").embedding
    refreshed = embed_all(served, model, SAMPLER, backend="dense").embedding

    yesterday = events.ts >= end - DAY
    movers = torch.unique(events.entity_id[events.src[yesterday]])
    movers = movers[torch.isin(movers, cut.entity_id)]
    assert movers.numel() >= 5
    old_rows, new_rows = torch.searchsorted(cut.entity_id, movers), torch.searchsorted(served.entity_id, movers)
    assert (refreshed[new_rows] - at_cutoff[old_rows]).norm(dim=1).min() > 1e-4
    # the refreshed view holds what the user engaged with yesterday; the cut-off view cannot
    last = torch.nonzero(yesterday).flatten()[-1]
    user, item = events.entity_id[events.src[last]], events.entity_id[events.dst[last]]
    user_row = torch.searchsorted(served.entity_id, user.reshape(1))
    view = ViewSampler(served, dataclasses.replace(SAMPLER, edge_dropout=0.0)).narrow(
        user_row, torch.Generator().manual_seed(0), times=torch.tensor([served.cutoff], dtype=torch.float64))
    assert int(torch.searchsorted(served.entity_id, item.reshape(1))) in view.node[0].tolist()
    # the cut-off embeddings do not change by being computed again
    assert torch.equal(at_cutoff, embed_all(cut, model, SAMPLER, backend="dense").embedding)
