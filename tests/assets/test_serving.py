"""The serving assets: feature tables with blocking checks, feast_registry, feast_online over partitions."""

import sqlite3

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from hir.assets.serving import feast_online, feast_registry, feature_tables
from hir.cli.bench.feast import write_fake_upstream
from hir.resources import build_resources
from hir.serving.feast_store import FeastStore
from hir.storage import Artifacts, write_parquet

P1, P2, P3 = "2026-01-05", "2026-01-06", "2026-01-07"
COUNTS = {"user": 5, "product": 3}
ASSETS = [feature_tables, feast_registry, feast_online]


def _run(settings, partition, raise_on_error=True):
    return dg.materialize(ASSETS, partition_key=partition, resources=build_resources(settings),
                          raise_on_error=raise_on_error)


def _check_results(result) -> dict[str, bool]:
    return {c.check_name: c.passed for c in result.get_asset_check_evaluations()}


def _materialised(result) -> set[str]:
    return {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}


def test_partitions_materialise_in_any_order_and_keep_the_newest(settings):
    write_fake_upstream(settings.artifacts_dir, P1, COUNTS, 8, seed=1, model_version="m1")
    v2 = write_fake_upstream(settings.artifacts_dir, P2, COUNTS, 8, seed=2, with_tokens=False, model_version="m2")
    first = _run(settings, P1)
    assert first.success
    assert _check_results(first) == {"finite_vectors": True, "embedding_dim": True, "one_row_per_entity": True,
                                     "online_matches_tables": True}
    tokens = pq.read_table(Artifacts(settings.artifacts_dir).feature_table(P1, "product")).column("bom_tokens").to_pylist()
    assert all(len(t) == 3 for t in tokens)
    assert _run(settings, P2).success
    again = _run(settings, P1)
    assert again.success, "re-materialising an older partition"
    assert _check_results(again)["online_matches_tables"] is True
    feast = FeastStore.from_settings(settings)
    got = feast.online("user", [f"user-{i}" for i in range(COUNTS["user"])] + ["stranger"])
    np.testing.assert_array_equal(np.array(got["hir_embedding"][:-1], np.float32), v2["user"])
    assert got["model_version"][:-1] == ["m2"] * COUNTS["user"] and got["hir_embedding"][-1] is None
    assert got["bom_tokens"][0] == [], "partition 2 had no tokens file"
    with sqlite3.connect(str(feast.online_path)) as con:
        per_feature = con.execute("SELECT count(*), count(DISTINCT entity_key) FROM hir_product_features "
                                  "WHERE feature_name = 'hir_embedding'").fetchone()
    assert per_feature == (COUNTS["product"], COUNTS["product"])


def test_non_finite_vectors_block_materialisation(settings):
    write_fake_upstream(settings.artifacts_dir, P3, COUNTS, 4, seed=3)
    path = settings.artifacts_dir / "entity_embeddings" / P3 / "embeddings.parquet"
    table = pq.read_table(path)
    flat = pc.list_flatten(table.column("embedding")).to_numpy().copy()
    flat[5] = np.nan
    broken = table.set_column(table.schema.get_field_index("embedding"), "embedding",
                              pa.FixedSizeListArray.from_arrays(pa.array(flat, pa.float32()), 4))
    write_parquet(path, broken)
    result = _run(settings, P3, raise_on_error=False)
    assert _check_results(result)["finite_vectors"] is False
    materialised = _materialised(result)
    assert "feature_tables" in materialised
    assert "feast_online" not in materialised and "feast_registry" not in materialised
