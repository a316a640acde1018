"""hir_encoder and entity_embeddings on a planted snapshot in a temporary data home."""

import json

import dagster as dg
import pyarrow.parquet as pq
import pytest
from hir.models.planted import planted_events, write_snapshot
from hir.models.validation import kept_cycle
from hir.partitions import cutoff_of

DAY1, DAY2 = "2026-01-05", "2026-01-06"


@pytest.fixture
def home(data_home, monkeypatch):
    """Two daily snapshots of a planted graph, its entities and planted truth in the warehouse."""
    from hir.graph.warehouse import connect
    from hir.settings import Settings

    for name, value in {
        "HIR_TRAIN_STEPS": "6", "HIR_FINETUNE_STEPS": "2", "HIR_TRAIN_BATCH": "8", "HIR_TRAIN_DIM": "16",
        "HIR_TRAIN_LAYERS": "1", "HIR_TRAIN_HEADS": "2", "HIR_TRAIN_COARSE": "4", "HIR_TRAIN_FINE": "8",
        "HIR_TRAIN_BROAD_TOKENS": "16", "HIR_TRAIN_NARROW_TOKENS": "6", "HIR_TRAIN_LOG_EVERY": "2",
        "HIR_EMBED_BATCH": "64", "HIR_THREADS": "1", "HIR_DEVICE": "cpu",
    }.items():
        monkeypatch.setenv(name, value)
    settings = Settings.from_env()
    events = planted_events(users=60, items=40, coarse=4, fine_per_coarse=2, events_per_user=6, days=3.0,
                            end=cutoff_of(DAY2).timestamp())
    for day in (DAY1, DAY2):
        write_snapshot(events, cutoff_of(day).timestamp(), settings.artifacts_dir / "graph_snapshot" / day)
    with connect(settings.warehouse_path) as con:
        ids = events.entity_id.tolist()
        kinds = ["user" if t == 0 else "item" for t in events.entity_type.tolist()]
        con.executemany("INSERT INTO entities (entity_id, entity_type, source_key) VALUES (?, ?, ?)",
                        [(i, k, f"{k}-{i}") for i, k in zip(ids, kinds)])
        con.execute("CREATE TABLE planted_truth (entity_id BIGINT, coarse_interest INTEGER, fine_interest INTEGER)")
        con.executemany("INSERT INTO planted_truth VALUES (?, ?, ?)",
                        [(i, c, f % 2) for i, c, f in zip(ids, events.coarse.tolist(), events.fine.tolist())])
    return settings


def _materialize(asset, partition, settings):
    from hir.resources import build_resources

    result = dg.materialize([asset], partition_key=partition, resources=build_resources(settings))
    assert result.success
    return result.asset_materializations_for_node(asset.op.name)[0].metadata


@pytest.mark.slow
def test_encoder_then_embeddings_then_warm_start(home):
    from hir.assets.training import entity_embeddings, hir_encoder

    meta = _materialize(hir_encoder, DAY1, home.replace(train_cycles=2, train_holdout_users=10))
    folder = home.artifacts_dir / "hir_encoder" / DAY1
    assert {p.name for p in folder.iterdir()} == {"model.safetensors", "optimizer.safetensors", "config.json", "state.json"}
    state = json.loads((folder / "state.json").read_text())
    assert state["step"] == {1: 6, 2: 18}[len(state["cycle_recall"])]  # cycles of 6, then 12 steps
    assert meta["held_out_examples"].value > 0
    assert meta["selected_cycle"].value == kept_cycle(state["cycle_recall"], meta["held_out_examples"].value) >= 1
    assert "| 1 | " in meta["held_out_recall_by_cycle"].value
    assert meta["parameters"].value > 0 and meta["warm_started_from"].value == "scratch"
    assert "data:image/png;base64" in meta["curves"].value
    assert not (home.artifacts_dir / "hir_encoder" / f".work-{DAY1}").exists()

    meta = _materialize(entity_embeddings, DAY1, home)
    table = pq.read_table(home.artifacts_dir / "entity_embeddings" / DAY1 / "embeddings.parquet")
    nodes = pq.read_table(home.artifacts_dir / "graph_snapshot" / DAY1 / "nodes.parquet")
    assert table.num_rows == nodes.num_rows == meta["dagster/row_count"].value
    assert str(table.schema.field("embedding").type) == "fixed_size_list<element: float>[16]"
    assert str(table.schema.field("cutoff").type) == "timestamp[us, tz=UTC]"
    assert str(table.schema.field("coarse_prototype").type) == "int32"
    row = table.slice(0, 1).to_pylist()[0]
    assert row["source_key"] == f"{row['entity_type']}-{row['entity_id']}"
    assert 0.0 <= meta["nmi_coarse_vs_planted"].value <= 1.0
    assert meta["attention_backend"].value == "flex"
    assert meta["flex_dense_max_abs_diff"].value <= 1e-3

    meta = _materialize(hir_encoder, DAY2, home)
    assert meta["warm_started_from"].value == str(folder)
    assert meta["steps"].value == 2


@pytest.mark.slow
def test_entity_embeddings_fall_back_to_dense_when_flex_disagrees(home, monkeypatch):
    import hir.models.inference as inference
    import numpy as np
    import torch
    from hir.assets.training import entity_embeddings, hir_encoder
    from hir.models.checkpoint import load_model, read_configs
    from hir.models.graph import load_snapshot

    _materialize(hir_encoder, DAY1, home)
    monkeypatch.setattr(inference, "flex_self_check", lambda *args, **kwargs: float("inf"))
    meta = _materialize(entity_embeddings, DAY1, home)
    assert meta["attention_backend"].value == "dense"
    assert meta["flex_dense_max_abs_diff"].value == float("inf")
    folder = home.artifacts_dir / "hir_encoder" / DAY1
    graph = load_snapshot(home.artifacts_dir / "graph_snapshot" / DAY1)
    model = load_model(folder, max(1, len(graph.edge_types)))
    dense = inference.embed_all(graph, model, read_configs(folder)[2], batch_size=64, backend="dense").embedding
    written = pq.read_table(home.artifacts_dir / "entity_embeddings" / DAY1 / "embeddings.parquet").column("embedding")
    assert np.allclose(np.stack(written.to_numpy(zero_copy_only=False)), dense.numpy(), atol=1e-6)
    assert torch.isfinite(dense).all()


def test_non_finite_embeddings_are_refused_by_name():
    import numpy as np
    from hir.assets.training import _require_finite

    embedding = np.ones((3, 4), np.float32)
    _require_finite(embedding, np.array([10, 11, 12]), {11: "user-b"})
    embedding[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"1 non-finite embedding.*11 \(user-b\)"):
        _require_finite(embedding, np.array([10, 11, 12]), {11: "user-b"})
