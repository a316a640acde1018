"""graph_snapshot and eval_windows materialised in process on a tiny hand-filled warehouse."""

from __future__ import annotations

from datetime import datetime, timezone

import dagster as dg
import pyarrow.parquet as pq
from hir.assets.graph import eval_windows, graph_snapshot
from hir.graph.warehouse import connect
from hir.resources import build_resources
from hir.settings import Settings
from snapshot_data import add_events, tiny_warehouse

PARTITION = "2026-01-04"  # cut-off 2026-01-05 00:00 UTC


def _materialise(settings, partition: str) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [graph_snapshot, eval_windows],
        partition_key=partition,
        resources=build_resources(settings),
    )


def _contents(folder) -> dict[str, object]:
    return {
        "nodes": pq.read_table(folder / "nodes.parquet"),
        "edges": pq.read_table(folder / "edges.parquet"),
        "meta": (folder / "meta.json").read_text(),
    }


def test_materialise_writes_snapshot_windows_and_passing_checks(settings):
    tiny_warehouse(settings.warehouse_path)
    result = _materialise(settings, PARTITION)
    assert result.success
    checks = result.get_asset_check_evaluations()
    assert {c.check_name for c in checks} == {"no_future_events", "edge_endpoints_exist", "windows_disjoint"}
    assert all(c.passed for c in checks)

    (snapshot,) = [m for m in result.get_asset_materialization_events() if m.asset_key.path == ["graph_snapshot"]]
    metadata = snapshot.materialization.metadata
    assert metadata["num_edges"].value == 5 and metadata["num_nodes"].value == 5
    assert metadata["plot"].value.startswith("![graph snapshot](data:image/png;base64,")
    assert "user:1" in metadata["preview"].value
    folder = settings.artifacts_dir / "graph_snapshot" / PARTITION
    assert {p.name for p in folder.iterdir()} == {"nodes.parquet", "edges.parquet", "meta.json", "state"}
    assert {p.name for p in (folder / "state").iterdir()} == {"edges.parquet", "sequences.parquet", "days.parquet", "state.json"}
    assert metadata["incremental"].value is False and metadata["late_events"].value == 0
    windows = pq.read_table(settings.artifacts_dir / "eval_windows" / PARTITION / "windows.parquet")
    assert windows.column("split").to_pylist() == ["validation", "validation", "test"]


def test_rematerialising_replaces_exactly_that_partition(settings):
    tiny_warehouse(settings.warehouse_path)
    base = settings.artifacts_dir / "graph_snapshot"
    assert _materialise(settings, "2026-01-03").success
    assert _materialise(settings, PARTITION).success
    other = {p.name: p.stat().st_mtime_ns for p in (base / "2026-01-03").iterdir()}
    first = _contents(base / PARTITION)
    (base / PARTITION / "stale.txt").write_text("left over from an older layout")

    assert _materialise(settings, PARTITION).success

    again = _contents(base / PARTITION)
    assert again["meta"] == first["meta"]
    assert again["nodes"].equals(first["nodes"]) and again["edges"].equals(first["edges"])
    assert not (base / PARTITION / "stale.txt").exists()
    assert {p.name: p.stat().st_mtime_ns for p in (base / "2026-01-03").iterdir()} == other
    assert sorted(p.name for p in base.iterdir()) == ["2026-01-03", PARTITION]
    # The earlier cut-off sees less: the 2026-01-04 events are not in it.
    assert _contents(base / "2026-01-03")["edges"].num_rows < first["edges"].num_rows


def _snapshot_metadata(result: dg.ExecuteInProcessResult) -> dict:
    (snapshot,) = [m for m in result.get_asset_materialization_events() if m.asset_key.path == ["graph_snapshot"]]
    return {k: v.value for k, v in snapshot.materialization.metadata.items()}


def test_next_day_advances_the_state_and_a_late_event_recomputes_from_its_day(settings, monkeypatch):
    tiny_warehouse(settings.warehouse_path)
    base = settings.artifacts_dir / "graph_snapshot"
    assert _materialise(settings, "2026-01-03").success
    result = _materialise(settings, PARTITION)
    assert result.success and all(c.passed for c in result.get_asset_check_evaluations())
    metadata = _snapshot_metadata(result)
    assert metadata["incremental"] is True and metadata["late_events"] == 0
    assert "incremental from the state at 2026-01-04" in metadata["build"]

    # A click on Jan 3, after partition 2026-01-03 was built: that state is stale.
    with connect(settings.warehouse_path) as con:
        add_events(con, [(2, 10, "click", datetime(2026, 1, 3, 18, tzinfo=timezone.utc), 1.0)])
    result = _materialise(settings, PARTITION)
    assert result.success and all(c.passed for c in result.get_asset_check_evaluations())
    metadata = _snapshot_metadata(result)
    assert metadata["incremental"] is False and metadata["late_events"] == 1
    assert (metadata["first_late_day"], metadata["stale_partitions"]) == ("2026-01-03", "2026-01-03")
    late = _contents(base / PARTITION)

    monkeypatch.setenv("HIR_SNAPSHOT_INCREMENTAL", "0")  # the full rebuild agrees
    assert _materialise(Settings.from_env(), PARTITION).success
    full = _contents(base / PARTITION)
    assert late["nodes"].equals(full["nodes"]) and late["edges"].equals(full["edges"])
    assert late["edges"].num_rows == 6  # the late click is a new edge
