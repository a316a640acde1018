"""World-knowledge assets materialised in process on a temp warehouse whose ``content`` table is filled directly."""

from __future__ import annotations

import csv

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import shared_data
from hir.assets.world_knowledge import (
    image_embeddings,
    text_embeddings,
    world_knowledge,
)
from hir.graph.warehouse import connect
from hir.resources import ArtifactStore, Warehouse
from hir.world_knowledge.embedders import ImageEmbedder, TextEmbedder
from tiny_open_clip import write_tiny_clip

# The same content hash the ingest loader computes.
_UPSERT = """
INSERT OR REPLACE INTO content
SELECT e, t, u, sha256(coalesce(t, '') || chr(0) || coalesce(u, ''))
FROM (SELECT ?::BIGINT AS e, ?::VARCHAR AS t, ?::VARCHAR AS u)
"""
MINILM = 384
TINY = 32


def fashion_rows(n: int) -> list[tuple[str, str]]:
    """``(caption, image path)`` of the first ``n`` fashion products."""
    folder = shared_data("fashion_images")
    with open(folder / "styles.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))[:n]
    return [(r["productDisplayName"], str(folder / "images" / r["image"])) for r in rows]


def upsert_content(settings, rows) -> None:
    with connect(settings.warehouse_path) as con:
        for row in rows:
            con.execute(_UPSERT, list(row))


@pytest.fixture
def world(settings, tmp_path):
    """Content for 11 entities: text+image, text only, image only, a corrupt image, a duplicate."""
    fashion = fashion_rows(7)
    corrupt = tmp_path / "broken.jpg"
    corrupt.write_bytes(b"\xff\xd8\xff not really a jpeg" * 8)
    rows = [(i + 1, text, image) for i, (text, image) in enumerate(fashion[:6])]
    rows += [
        (7, "Plain cotton socks, pack of three", None),
        (8, None, fashion[6][1]),
        (9, "Leather wallet with a broken photo", str(corrupt)),
        (10, None, str(corrupt)),
        (11, fashion[0][0], fashion[0][1]),
    ]
    upsert_content(settings, rows)
    config, weights, _ = write_tiny_clip(tmp_path / "clip")
    return {"config": str(config), "weights": str(weights), "corrupt": str(corrupt), "clip_dir": tmp_path / "clip"}


def resources(settings, world, checkpoint: str | None = None) -> dict:
    return {
        "warehouse": Warehouse(path=str(settings.warehouse_path), threads=1),
        "artifacts": ArtifactStore(root=str(settings.artifacts_dir)),
        "text_embedder": TextEmbedder(batch_size=16),
        "image_embedder": ImageEmbedder(
            model=world["config"], checkpoint=world["weights"] if checkpoint is None else checkpoint, batch_size=4
        ),
    }


def run(settings, world, checkpoint: str | None = None) -> dict[str, dict]:
    """Materialise the three assets; return each asset's metadata as plain values."""
    result = dg.materialize(
        [dg.AssetSpec("content"), text_embeddings, image_embeddings, world_knowledge],
        resources=resources(settings, world, checkpoint),
        instance=dg.DagsterInstance.ephemeral(),
        selection=["text_embeddings", "image_embeddings", "world_knowledge"],
    )
    assert result.success
    return {
        name: {k: getattr(v, "value", v) for k, v in result.asset_materializations_for_node(name)[0].metadata.items()}
        for name in ("text_embeddings", "image_embeddings", "world_knowledge")
    }


def read_world_knowledge(settings) -> dict[int, dict]:
    table = pq.read_table(settings.artifacts_dir / "world_knowledge" / "_all" / "world_knowledge.parquet")
    return {row["entity_id"]: row for row in table.to_pylist()}


def test_first_run_embeds_all_fuses_and_skips_the_corrupt_image(settings, world):
    meta = run(settings, world)
    text, image, fused = meta["text_embeddings"], meta["image_embeddings"], meta["world_knowledge"]
    # 8 distinct texts (entity 11 duplicates entity 1), 10 distinct contents for CLIP.
    assert (text["embedded"], text["cached"], text["total"], text["dimension"]) == (8, 0, 8, MINILM)
    assert text["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert (image["embedded"], image["total"], image["dimension"]) == (10, 10, TINY)
    assert (image["images_embedded"], image["texts_embedded"]) == (7, 8)
    assert image["images_skipped"] == 1 and image["images_failed_this_run"] == 2
    assert "broken.jpg" in image["skipped_files"] and "unreadable image" in image["skipped_files"]

    assert fused["dimension"] == MINILM + TINY and fused["dagster/row_count"] == 10
    assert fused["without_usable_content"] == 1  # entity 10: only a corrupt image
    assert (fused["text_and_image"], fused["text_only"], fused["image_only"]) == (7, 2, 1)

    schema = pq.read_schema(settings.artifacts_dir / "world_knowledge" / "_all" / "world_knowledge.parquet")
    assert schema.field("entity_id").type == pa.int64()
    vector_type = schema.field("vector").type
    assert pa.types.is_fixed_size_list(vector_type) and vector_type.list_size == MINILM + TINY
    assert vector_type.value_type == pa.float32()
    assert schema.field("has_text").type == pa.bool_() and schema.field("model").type == pa.string()

    rows = read_world_knowledge(settings)
    assert sorted(rows) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 11]
    flags = {e: (r["has_text"], r["has_image"]) for e, r in rows.items()}
    assert flags[1] == flags[11] == (True, True)
    assert flags[7] == flags[9] == (True, False) and flags[8] == (False, True)
    vectors = {e: np.asarray(r["vector"], dtype=np.float32) for e, r in rows.items()}
    for v in vectors.values():
        assert abs(np.linalg.norm(v) - 1) < 1e-5
    np.testing.assert_array_equal(vectors[1], vectors[11])
    assert not vectors[8][:MINILM].any() and vectors[8][MINILM:].any()  # image only: text block empty, flagged
    assert vectors[7][MINILM:].any()  # text only: the CLIP text tower fills the CLIP block
    # Both blocks present → each carries half of the squared norm.
    assert abs(np.linalg.norm(vectors[1][:MINILM]) ** 2 - 0.5) < 1e-4
    assert "clip=open_clip:hir-tiny-clip:sha256-" in rows[1]["model"]


def test_rerun_embeds_only_changed_content(settings, world):
    run(settings, world)
    again = run(settings, world)
    assert (again["text_embeddings"]["embedded"], again["text_embeddings"]["cached"]) == (0, 8)
    assert (again["image_embeddings"]["embedded"], again["image_embeddings"]["cached"]) == (0, 10)
    before = read_world_knowledge(settings)

    upsert_content(settings, [(2, "A completely new caption for product two", world["corrupt"].replace("broken", "x")),
                              (7, "Plain cotton socks, pack of five", None)])
    changed = run(settings, world)
    text, image = changed["text_embeddings"], changed["image_embeddings"]
    assert (text["embedded"], text["cached"], text["removed_stale_rows"]) == (2, 6, 2)
    assert (image["embedded"], image["cached"], image["removed_stale_rows"]) == (2, 8, 2)
    assert image["images_failed_this_run"] == 1  # entity 2 now points at a missing file
    after = read_world_knowledge(settings)
    assert after[2]["has_image"] is False and after[2]["has_text"] is True
    for entity in (1, 3, 8, 11):
        assert after[entity]["vector"] == before[entity]["vector"]
    assert after[7]["vector"] != before[7]["vector"]


def test_model_change_re_embeds_everything_and_missing_weights_fall_back_to_text(settings, world):
    first = run(settings, world)
    _, other_weights, _ = write_tiny_clip(world["clip_dir"], seed=1)
    changed = run(settings, world, checkpoint=str(other_weights))
    image = changed["image_embeddings"]
    assert (image["embedded"], image["cached"], image["removed_stale_rows"]) == (10, 0, 10)
    assert image["model"] != first["image_embeddings"]["model"]
    assert changed["text_embeddings"]["embedded"] == 0

    without = run(settings, world, checkpoint="")
    assert without["image_embeddings"]["dagster/row_count"] == 0
    assert without["image_embeddings"]["available"] is False
    assert without["image_embeddings"]["no_weights_reason"].startswith("no weights:")
    fused = without["world_knowledge"]
    assert fused["dimension"] == MINILM and fused["without_usable_content"] == 2  # entities 8 and 10
    rows = read_world_knowledge(settings)
    assert 8 not in rows and not any(r["has_image"] for r in rows.values())
    assert rows[1]["model"] == "fused(text=sentence-transformers/all-MiniLM-L6-v2)"


def test_content_without_text_or_image_gives_empty_world_knowledge_and_says_why(settings, tmp_path):
    import torch
    from hir.assets.world_knowledge import EMPTY_REASON
    from hir.world_knowledge.vectors import read_world_knowledge as read_for_training

    config, weights, _ = write_tiny_clip(tmp_path / "clip")
    upsert_content(settings, [(1, None, None), (2, "", "")])  # an event log's entities: no catalogue
    meta = run(settings, {"config": str(config), "weights": str(weights)})
    assert meta["text_embeddings"]["total"] == meta["image_embeddings"]["total"] == 0
    fused = meta["world_knowledge"]
    assert (fused["dimension"], fused["dagster/row_count"], fused["without_usable_content"]) == (0, 0, 2)
    assert fused["empty_because"] == EMPTY_REASON and "map" not in fused
    path = settings.artifacts_dir / "world_knowledge" / "_all" / "world_knowledge.parquet"
    assert pq.read_table(path).num_rows == 0
    assert read_for_training(path, torch.arange(3)) is None  # the encoder trains without world knowledge
