"""The trainer on a small planted graph: learning, no collapse, engagement, checkpoints and resume, warm
start, interest clusters learnt from the graph."""

import dataclasses
import json
import math

import pytest
import torch
from hir.models.checkpoint import CheckpointMismatch, load_model
from hir.models.clustering import nested_clusters
from hir.models.encoder import EncoderConfig
from hir.models.engagement import auc
from hir.models.inference import embed_all
from hir.models.losses import usage_entropy
from hir.models.model import TrainConfig, encoder_config_for
from hir.models.planted import PlantedEvents, planted_events, snapshot_at, split_edges
from hir.models.sampler import SamplerConfig
from hir.models.trainer import Trainer
from safetensors.torch import load_file

VIEWS_AT_HALF_A_CLICK = "view:0.5,click:1"  # the planted graph's views as targets (by default they are context)
SAMPLER = SamplerConfig(broad_tokens=24, broad_walkers=12, broad_steps=6, narrow_tokens=8, narrow_walkers=8, narrow_steps=3)

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_config(**overrides) -> TrainConfig:
    values = dict(steps=8, batch_size=16, coarse=4, fine=8, proj_dim=16, log_every=2, checkpoint_every=100, warmup_steps=2)
    values.update(overrides)
    return TrainConfig(**values)


def encoder_for(graph) -> EncoderConfig:
    return encoder_config_for(graph, dim=16, layers=1, heads=2, hash_buckets=2048, dropout=0.0)


@pytest.fixture(scope="module")
def planted():
    events = planted_events(users=160, items=100, coarse=4, fine_per_coarse=2, events_per_user=10, p_fine=0.8, p_coarse=0.15)
    graph, entity = snapshot_at(events, float(events.ts.max()) + 1)
    return events, graph, entity


@pytest.fixture(scope="module")
def trained(planted, tmp_path_factory):
    """One run of 150 steps on the planted graph with 15% of the edges held out."""
    _, graph, _ = planted
    train_graph, held = split_edges(graph, 0.15, seed=0)
    out = tmp_path_factory.mktemp("trained")
    config = tiny_config(steps=150, batch_size=64, log_every=10, lr=2e-2)
    result = Trainer(train_graph, config, encoder_for(graph), SAMPLER, out).fit()
    return train_graph, held, out, result


def test_loss_decreases(trained):
    *_, result = trained
    losses = [m["loss"] for m in result.metrics]
    assert len(losses) == 15
    assert sum(losses[-3:]) / 3 < sum(losses[:2]) / 2


def test_prototype_usage_stays_above_half_its_maximum(trained):
    train_graph, _, out, _ = trained
    emb = embed_all(train_graph, load_model(out, len(train_graph.edge_types)), SAMPLER, backend="dense", batch_size=128)
    assert emb.embedding.shape == (train_graph.num_nodes, 16)
    assert usage_entropy(emb.coarse, 4) > 0.5
    assert usage_entropy(emb.fine, 8) > 0.5


def test_engagement_head_ranks_held_out_edges_above_negatives(trained):
    train_graph, held, out, _ = trained
    model = load_model(out, len(train_graph.edge_types))
    emb = embed_all(train_graph, model, SAMPLER, backend="dense", batch_size=128).embedding
    src, dst, etype = held.T
    items = torch.nonzero(train_graph.node_type == 1).flatten()
    fake = items[torch.randint(0, items.numel(), (dst.numel(),), generator=torch.Generator().manual_seed(0))]
    age = torch.zeros(dst.numel())
    with torch.no_grad():
        pos = model.engagement(emb[src], emb[dst], etype, age)
        neg = model.engagement(emb[src], emb[fake], etype, age)
    assert auc(pos, neg) > 0.7


def test_checkpoint_files_and_state(trained):
    *_, out, result = trained
    state = json.loads((out / "state.json").read_text())
    assert state["step"] == 150 and state["parameters"] == result.parameters
    assert {"python", "numpy", "torch"} <= set(state["rng"])
    weights = load_file(str(out / "model.safetensors"))
    assert any(k.startswith("teacher.prototypes") for k in weights)
    assert load_file(str(out / "optimizer.safetensors"))


def test_kill_and_resume_equals_uninterrupted(planted, tmp_path):
    _, graph, _ = planted
    config = tiny_config(steps=6, checkpoint_every=3)
    straight = Trainer(graph, config, encoder_for(graph), SAMPLER, tmp_path / "straight").fit()
    Trainer(graph, config, encoder_for(graph), SAMPLER, tmp_path / "resumed").fit(stop_after=3)
    resumed = Trainer(graph, config, encoder_for(graph), SAMPLER, tmp_path / "resumed")
    assert resumed.step == 3
    result = resumed.fit()
    assert result.step == straight.step == 6
    a = load_file(str(tmp_path / "straight" / "model.safetensors"))
    b = load_file(str(tmp_path / "resumed" / "model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        assert torch.allclose(a[key], b[key], atol=1e-6), key
    assert [m["loss"] for m in straight.metrics] == pytest.approx([m["loss"] for m in result.metrics], rel=1e-5)


def test_checkpoint_with_other_config_is_refused(planted, tmp_path):
    _, graph, _ = planted
    Trainer(graph, tiny_config(steps=2), encoder_for(graph), SAMPLER, tmp_path).fit()
    with pytest.raises(CheckpointMismatch, match=r"train\.coarse: checkpoint 4 != requested 6"):
        Trainer(graph, tiny_config(steps=2, coarse=6), encoder_for(graph), SAMPLER, tmp_path)
    # Logging and checkpoint cadence change no number: those may differ.
    Trainer(graph, tiny_config(steps=2, log_every=1), encoder_for(graph), SAMPLER, tmp_path)


def test_warm_start_carries_weights_to_a_grown_graph(tmp_path):
    events = planted_events(users=120, items=80, events_per_user=8, days=4.0)
    day = 86_400.0
    end = float(events.ts.max()) + 1
    old, _ = snapshot_at(events, end - day)
    new, _ = snapshot_at(events, end)
    assert new.num_nodes >= old.num_nodes
    Trainer(old, tiny_config(steps=4), encoder_for(old), SAMPLER, tmp_path / "day1").fit()
    config = tiny_config(steps=4, warm_start=str(tmp_path / "day1"), finetune_steps=2)
    warm = Trainer(new, config, encoder_for(new), SAMPLER, tmp_path / "day2")
    before = load_file(str(tmp_path / "day1" / "model.safetensors"))
    assert torch.equal(warm.student.prototypes.fine.detach(), before["student.prototypes.fine"])
    result = warm.fit()
    assert result.step == 2 and result.warm_started_from == str(tmp_path / "day1")
    with pytest.raises(CheckpointMismatch, match="encoder.dim"):
        bigger = encoder_config_for(new, dim=32, layers=1, heads=2, hash_buckets=2048, dropout=0.0)
        Trainer(new, config, bigger, SAMPLER, tmp_path / "day2b")


def test_interest_clusters_come_from_the_graph_not_only_the_noisy_item_content(planted, tmp_path):
    """Items carry content that names their planted fine interest for only 30% of them (the rest
    name a random one), users none. Clustering that content alone barely finds the planted coarse
    interests; after training on the graph with it, the clusters of items and of users do."""
    from sklearn.metrics import normalized_mutual_info_score as nmi

    events, graph, entity = planted
    gen = torch.Generator().manual_seed(1)
    fines, items = int(events.fine.max()) + 1, graph.node_type == 1
    corrupted = torch.rand(graph.num_nodes, generator=gen) < 0.7
    label = torch.where(corrupted, torch.randint(0, fines, (graph.num_nodes,), generator=gen), events.fine[entity])
    wk = torch.nn.functional.one_hot(label, fines).float() + 0.3 * torch.randn(graph.num_nodes, fines, generator=gen)
    wk = torch.nn.functional.normalize(wk, dim=1) * items.float()[:, None]
    truth = events.coarse[entity].numpy()
    content_only, _ = nested_clusters(wk[items], graph.node_type[items], 4, 8)
    encoder = encoder_config_for(graph, dim=16, layers=1, heads=2, hash_buckets=2048, dropout=0.0, wk_dim=fines)
    Trainer(graph, tiny_config(steps=150, batch_size=64, lr=2e-2, log_every=10), encoder, SAMPLER, tmp_path, wk=wk).fit()
    emb = embed_all(graph, load_model(tmp_path, len(graph.edge_types)), SAMPLER, wk=wk, backend="dense", batch_size=128)
    coarse, _ = nested_clusters(emb.embedding, graph.node_type, 4, 8)
    content_nmi = nmi(truth[items], content_only.numpy())
    assert content_nmi < 0.15  # the content alone hardly tells the interests apart
    assert nmi(truth[items], coarse[items].numpy()) > content_nmi + 0.3
    assert nmi(truth[~items], coarse[~items].numpy()) > 0.45  # users have no content: only the graph
    assert nmi(truth, coarse.numpy()) > 0.45


def test_training_views_hold_nothing_at_or_after_their_example_and_report_gradient_shares(planted, tmp_path):
    """Every view the trainer builds in a step (teacher and student) holds only edges strictly before
    its anchor's example time — so no example's own engagement (``last_ts = t``) is inside — and
    the record after a measured step carries each loss's share of the gradient norm."""
    _, graph, _ = planted
    config = tiny_config(steps=2, log_every=1, pool_size=40, grad_share_every=1, w_nce=1.0)
    trainer = Trainer(graph, config, encoder_for(graph), SAMPLER, tmp_path)
    seen = []

    def recording(sample):
        def wrapped(anchors, gen, times=None, exclude=None):
            view = sample(anchors, gen, times=times, exclude=exclude)
            seen.append((view, times))
            return view
        return wrapped

    trainer.sampler.broad = recording(trainer.sampler.broad)
    trainer.sampler.narrow = recording(trainer.sampler.narrow)
    result = trainer.fit()
    assert len(seen) == 2 * (1 + config.narrow_views)  # per step: teacher, student (the pool among its anchors)
    for view, times in seen:
        assert times is not None and bool((times < graph.cutoff).all())
        brought = ~view.pad & (view.hop > 0)
        assert bool((view.edge_dt[brought] > 0).all())  # t − last_ts > 0: strictly before t
        assert int(brought.sum()) > view.node.shape[0]  # and the views are not empty
    shares = {k: v for k, v in result.metrics[-1].items() if k.startswith("grad_share_")}
    assert set(shares) == {f"grad_share_{n}" for n in ("next", "proto", "pair", "hier", "eng", "nce")}
    assert abs(sum(shares.values()) - 1) < 1e-6 and shares["grad_share_next"] > 0


def test_steps_zero_trains_the_epochs_over_every_example(planted, tmp_path):
    _, graph, _ = planted
    config = tiny_config(steps=0, epochs=1.5, batch_size=16, funnel_weights=VIEWS_AT_HALF_A_CLICK)
    trainer = Trainer(graph, config, encoder_for(graph), SAMPLER, tmp_path)
    examples = trainer.examples.pass_size()  # the clicks, and each view as half of one
    assert len(trainer.examples) > examples > 16
    assert trainer.config.total_steps == math.ceil(1.5 * examples / 16)  # ⌈1.5 · pass / batch⌉
    trainer.fit(stop_after=1)
    resumed = Trainer(graph, config, encoder_for(graph), SAMPLER, tmp_path)
    assert resumed.step == 1 and resumed.config.total_steps == trainer.config.total_steps  # the checkpoint agrees


def test_pooled_ids_let_bare_ids_rank_held_out_items(tmp_path):
    """A sparse log of bare ids (no world knowledge; 6 events a user, 4.5 an item): the pooled hashed
    ids (``EncoderConfig.pooled_ids``) put a user nearer the items it will engage with than attention
    over the view's tokens alone does."""
    events = planted_events(users=300, items=400, coarse=4, fine_per_coarse=2, events_per_user=6, p_fine=0.8, p_coarse=0.15)
    graph, _ = snapshot_at(events, float(events.ts.max()) + 1)
    train_graph, held = split_edges(graph, 0.15, seed=0)
    src, dst, _ = held.T
    items = torch.nonzero(train_graph.node_type == 1).flatten()
    fake = items[torch.randint(0, items.numel(), (dst.numel(),), generator=torch.Generator().manual_seed(0))]
    held_auc = {}
    for pooled in (False, True):
        encoder = encoder_config_for(graph, dim=16, layers=1, heads=2, hash_buckets=2048, dropout=0.0, pooled_ids=pooled)
        Trainer(train_graph, tiny_config(steps=150, batch_size=64, lr=2e-2), encoder, SAMPLER, tmp_path / str(pooled)).fit()
        model = load_model(tmp_path / str(pooled), len(train_graph.edge_types))
        emb = torch.nn.functional.normalize(embed_all(train_graph, model, SAMPLER, backend="dense", batch_size=128).embedding, dim=1)
        held_auc[pooled] = auc((emb[src] * emb[dst]).sum(1), (emb[src] * emb[fake]).sum(1))
    assert held_auc[True] > held_auc[False] + 0.03


def _ring_events(users: int = 200, items: int = 60, per_user: int = 8, seed: int = 0) -> PlantedEvents:
    """Each user clicks ``per_user`` consecutive items of a ring, twelve hours apart: the next
    engagement is the item after the last one."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, items, (users,), generator=g).repeat_interleave(per_user)
    step = torch.arange(per_user).repeat(users)
    end = 1_767_225_600.0
    ts = end - 7 * 86_400 + torch.rand(users, generator=g, dtype=torch.float64).repeat_interleave(per_user) * 86_400 + step * 43_200.0
    n = users + items
    src = torch.arange(users).repeat_interleave(per_user)
    return PlantedEvents(entity_id=torch.arange(n) + 1, entity_type=(torch.arange(n) >= users).long(),
                         coarse=torch.zeros(n, dtype=torch.long), fine=torch.zeros(n, dtype=torch.long),
                         src=src, dst=users + (start + step) % items, edge_type=torch.ones_like(src), ts=ts)


def test_the_recency_pooling_learns_how_much_the_newest_engagement_matters(tmp_path):
    """Users who click along a ring (the next item follows the last) learn to pool their newest
    click above all (ρ from 1 to hundreds); users who click items of their interests in no order
    learn to pool by the walk alone (ρ towards 0)."""
    mixture = planted_events(users=200, items=60, coarse=4, fine_per_coarse=2, events_per_user=8, p_fine=0.8, p_coarse=0.15)
    mixture = dataclasses.replace(mixture, edge_type=torch.ones_like(mixture.edge_type))  # clicks, as on the ring
    sampler = dataclasses.replace(SAMPLER, broad_recent=8, narrow_recent=4)
    learnt = {}
    for name, events in (("ring", _ring_events()), ("mixture", mixture)):
        graph, _ = snapshot_at(events, float(events.ts.max()) + 1)
        encoder = encoder_config_for(graph, dim=16, layers=1, heads=2, hash_buckets=2048, dropout=0.0, pooled_ids=True, recency_weight=1.0)
        trainer = Trainer(graph, tiny_config(steps=150, batch_size=64, lr=2e-2, pool_size=64), encoder, sampler, tmp_path / name)
        result = trainer.fit()
        learnt[name] = float(trainer.student.recency()[0].detach())
        assert result.metrics[-1]["recency_weight"] == pytest.approx(learnt[name], rel=0.2)
    assert learnt["ring"] > 20 and learnt["mixture"] < 0.2


def test_the_hashed_id_table_learns_at_its_own_rate(planted, tmp_path):
    _, graph, _ = planted
    trainer = Trainer(graph, tiny_config(steps=2, id_lr_scale=4.0), encoder_for(graph), SAMPLER, tmp_path)
    before = trainer.student.encoder.node.hashed.weight.detach().clone()
    trainer.train_step()
    *others, table = trainer.optimizer.param_groups
    assert table["params"] == [trainer.student.encoder.node.hashed.weight]
    assert all(table["params"][0] is not p for group in others for p in group["params"])
    assert table["lr"] == pytest.approx(4.0 * others[0]["lr"]) and others[0]["lr"] == others[1]["lr"] > 0
    # Adam's first step moves every touched entry by about its learning rate
    moved = (trainer.student.encoder.node.hashed.weight.detach() - before).abs()
    assert moved.max().item() == pytest.approx(table["lr"], rel=0.05)


def test_pair_dropout_takes_the_pairs_own_edges_out_of_both_student_views(planted, tmp_path):
    """With ``pair_dropout`` 1 no student view of an example's user holds its positive and no view of
    the positive holds its user, though such earlier edges exist; at 0 they are there."""
    _, graph, _ = planted
    held = {}
    for p in (0.0, 1.0):
        trainer = Trainer(graph, tiny_config(steps=3, log_every=1, pool_size=40, pair_dropout=p), encoder_for(graph), SAMPLER, tmp_path / str(p))
        examples = trainer.examples
        seen = []
        sample = trainer.sampler.narrow

        def recording(anchors, gen, times=None, exclude=None):
            view = sample(anchors, gen, times=times, exclude=exclude)
            seen.append(view)
            return view

        trainer.sampler.narrow = recording
        batches = []
        draw = examples.draw
        examples.draw = lambda b, gen: batches.append(draw(b, gen)) or batches[-1]
        trainer.fit()
        count = 0
        views = trainer.config.narrow_views
        for k, view in enumerate(seen):
            batch = batches[k // views]
            b = batch.anchor.numel()
            users, items = view.node[:b], view.node[b:2 * b]
            count += int((users == batch.positive[:, None]).any(1).sum() + (items == batch.anchor[:, None]).any(1).sum())
        held[p] = count
    assert held[0.0] > 0  # the planted users engage again with what they engaged with before
    assert held[1.0] == 0


def test_item_residuals_are_kept_for_the_trained_items_and_survive_the_checkpoint(planted, tmp_path):
    """One row per item that is a training positive (98 of the planted graph's 100 items); the two
    items never engaged with and every user get no row, so they keep the encoder's vector."""
    _, graph, _ = planted
    trainer = Trainer(graph, tiny_config(steps=6, item_residual=True, residual_lr_scale=5.0), encoder_for(graph), SAMPLER, tmp_path)
    trained = trainer.examples.positive.unique()
    residual = trainer.student.residual
    assert trainer.config.residual_rows == trained.numel() == residual.weight.shape[0]
    assert torch.equal(residual.entity_ids, graph.entity_id[trained].sort().values)
    assert trainer.optimizer.param_groups[-1]["params"] == [residual.weight]
    trainer.fit()
    assert residual.weight.abs().sum(1).gt(0).any()  # the candidates' rows moved
    model = load_model(tmp_path, len(graph.edge_types))
    assert torch.equal(model.residual.weight, residual.weight) and torch.equal(model.residual.entity_ids, residual.entity_ids)
    others = torch.nonzero((graph.node_type == 1) & ~torch.isin(torch.arange(graph.num_nodes), trained)).flatten()
    users = torch.nonzero(graph.node_type == 0).flatten()
    assert others.numel() == 2 and model.residual(graph.entity_id[torch.cat([others, users])]).eq(0).all()


def test_item_context_learns_from_the_users_and_survives_the_checkpoint(planted, tmp_path):
    """The context table has the residuals' rows without them; its rows move only through the users
    that pooled them, and the checkpoint brings them back."""
    _, graph, _ = planted
    encoder = dataclasses.replace(encoder_for(graph), pooled_ids=True, pool_direct=True)
    trainer = Trainer(graph, tiny_config(steps=6, item_context=True), encoder, SAMPLER, tmp_path)
    context = trainer.student.context
    assert trainer.student.residual is None and context.weight.shape[0] == trainer.examples.positive.unique().numel()
    assert trainer.optimizer.param_groups[-1]["params"] == [context.weight]
    trainer.fit()
    assert context.weight.abs().sum(1).gt(0).any()
    model = load_model(tmp_path, len(graph.edge_types))
    assert torch.equal(model.context.weight, context.weight) and torch.equal(model.context.entity_ids, context.entity_ids)


def test_a_warm_start_carries_both_item_tables_by_entity_id():
    """Residual and context rows follow their items to the next snapshot's rows; a new item starts
    at zero; a table the checkpoint lacks starts at zero."""
    from hir.models.checkpoint import _carry_residuals
    from hir.models.model import HIRModel

    encoder = EncoderConfig(dim=4, layers=1, heads=1, num_node_types=2, num_edge_types=1, pooled_ids=True)
    model = HIRModel(encoder, TrainConfig(proj_dim=4, coarse=2, fine=2, item_residual=True, item_context=True, residual_rows=2), 1)
    for table in model.item_tables():
        table.set_items(torch.tensor([7, 9]))
    saved = {"context.entity_ids": torch.tensor([5, 7]), "context.weight": torch.tensor([[1.0] * 4, [2.0] * 4])}
    state = _carry_residuals(saved, model)
    assert state["context.weight"].tolist() == [[2.0] * 4, [0.0] * 4]  # item 7 kept its row, 9 is new
    assert state["residual.weight"].eq(0).all() and state["residual.entity_ids"].tolist() == [7, 9]


def test_warm_start_carries_each_items_residual_to_its_new_row(tmp_path):
    """The next day's run trains on more items: the items of both days keep their vectors (by entity
    id, whatever their rows), the new ones start at zero; a run without residuals drops them."""
    events = planted_events(users=120, items=80, events_per_user=8, days=4.0)
    end = float(events.ts.max()) + 1
    old, _ = snapshot_at(events, end - 2 * 86_400.0)
    new, _ = snapshot_at(events, end)
    Trainer(old, tiny_config(steps=4, item_residual=True), encoder_for(old), SAMPLER, tmp_path / "day1").fit()
    before = load_model(tmp_path / "day1", len(old.edge_types)).residual
    config = tiny_config(steps=4, item_residual=True, warm_start=str(tmp_path / "day1"), finetune_steps=2)
    after = Trainer(new, config, encoder_for(new), SAMPLER, tmp_path / "day2").student.residual
    assert after.entity_ids.numel() > before.entity_ids.numel()
    kept = torch.isin(after.entity_ids, before.entity_ids)
    assert kept.any() and (~kept).any()
    assert torch.equal(after(after.entity_ids[kept]), before(after.entity_ids[kept]))
    assert after.weight[~kept].eq(0).all() and before.weight.abs().sum() > 0
    plain = Trainer(new, dataclasses.replace(config, item_residual=False), encoder_for(new), SAMPLER, tmp_path / "day2b")
    assert plain.student.residual is None
