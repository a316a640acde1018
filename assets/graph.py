"""Graph stage: the temporal graph snapshot and the evaluation windows of a daily partition (DESIGN §5).

Partition ``D`` has cut-off ``T`` = midnight UTC after ``D``. ``graph_snapshot`` holds only what
happened before ``T``; ``eval_windows`` holds the validation and test events after it. The SQL lives
in :mod:`hir.graph.snapshot`; blocking checks re-read the written files and fail a snapshot that holds
anything at or after ``T`` or an edge without its nodes, and windows that overlap the training data.

A snapshot advances the edge state of the newest earlier partition by the new day's events
(``HIR_SNAPSHOT_INCREMENTAL``, on by default); late events in a day an earlier partition already
covered make it recompute from that day, and the metadata says so (``build``, ``late_events``).
The checks recount everything from the warehouse, so they hold an incremental snapshot to the
same standard as a full one.
"""

from datetime import datetime, timezone

import dagster as dg
from hir.partitions import DAILY, cutoff_of
from hir.resources import ArtifactStore, SettingsResource, Warehouse
from hir.storage import SNAPSHOT_EDGES_FILE, SNAPSHOT_NODES_FILE
from hir.tables import markdown_table

PREVIEW_ROWS = 10
# DuckDB lets one process write a file or several read it, never both at once: these steps only
# read, but take the writers' pool so that they never meet a writer in another process.
WAREHOUSE_POOL = "duckdb_writer"


def _type_table(counts: dict[str, int], what: str) -> str:
    return markdown_table([what, "rows"], sorted(counts.items()), {"rows": ","}, empty=f"no {what}s")


def _preview(folder) -> dg.MetadataValue:
    """The first edges of the snapshot, endpoints shown as ``entity_type:entity_id``."""
    import pyarrow.parquet as pq

    first = next(pq.ParquetFile(folder / SNAPSHOT_EDGES_FILE).iter_batches(batch_size=PREVIEW_ROWS), None)
    edges = first.to_pylist()[:PREVIEW_ROWS] if first is not None else []
    if not edges:
        return dg.MetadataValue.md("no edges")
    ends = sorted({e["src"] for e in edges} | {e["dst"] for e in edges})
    nodes = pq.read_table(folder / SNAPSHOT_NODES_FILE, columns=["entity_id", "entity_type"]).take(ends).to_pylist()
    label = {i: f"{n['entity_type']}:{n['entity_id']}" for i, n in zip(ends, nodes)}
    rows = [(label[e["src"]], label[e["dst"]], e["edge_type"], e["count"],
             datetime.fromtimestamp(e["last_ts"], tz=timezone.utc).isoformat(timespec="seconds"), e["weight"])
            for e in edges]
    return dg.MetadataValue.md(markdown_table(["src", "dst", "edge_type", "count", "last_ts", "weight"], rows, {"weight": ".3f"}))


def _plot(folder, summary) -> dg.MetadataValue:
    """Degree distribution (log-log) beside the edge count per type."""
    import numpy as np
    import pyarrow.parquet as pq
    from hir.plots import figure, png_markdown

    degree = pq.read_table(folder / SNAPSHOT_NODES_FILE, columns=["degree"]).column(0).to_numpy()
    fig, (left, right) = figure(9, 3.2, ncols=2)
    values, counts = np.unique(degree[degree > 0], return_counts=True)
    left.loglog(values, counts, ".", markersize=4)
    left.set(title="degree distribution", xlabel="degree", ylabel="nodes")
    types = sorted(summary.edges_per_type)
    right.barh(types, [summary.edges_per_type[t] for t in types])
    right.set(title="edges per type", xlabel="edges")
    fig.tight_layout()
    return png_markdown(fig, "graph snapshot")


@dg.asset(
    partitions_def=DAILY,
    deps=["events", "relations", "entities"],
    pool=WAREHOUSE_POOL,
    group_name="graph",
    kinds={"duckdb", "parquet"},
    owners=["team:hir"],
    description=(
        "Typed, weighted, time-decayed graph before the partition's cut-off T: edges per "
        "(src, dst, type) with count, last time and weight Σ 2^(-(T-ts)/half-life), relations valid "
        "before T, and nodes with degree, age and 7-day activity."
    ),
    check_specs=[
        dg.AssetCheckSpec(
            "no_future_events", asset="graph_snapshot", blocking=True,
            description="every edge's last_ts < T and the edge counts add up to exactly the events, relations and transitions before T",
        ),
        dg.AssetCheckSpec(
            "edge_endpoints_exist", asset="graph_snapshot", blocking=True,
            description="every edge endpoint is a row of the node table",
        ),
    ],
)
def graph_snapshot(context: dg.AssetExecutionContext, warehouse: Warehouse, artifacts: ArtifactStore, hir_settings: SettingsResource):
    from hir.graph.snapshot import STATE_DIR, build_snapshot, verify_snapshot

    settings = hir_settings.get()
    key = context.partition_key
    cutoff = cutoff_of(key)
    states = [artifacts.catalogue.snapshot_dir(p) / STATE_DIR for p in reversed(artifacts.partitions("graph_snapshot")) if p < key]
    with warehouse.connect(read_only=True) as con, artifacts.write_partition("graph_snapshot", key) as out:
        summary = build_snapshot(con, cutoff, settings, out, states)
    folder = artifacts.catalogue.snapshot_dir(key)
    with warehouse.connect(read_only=True) as con:
        checks = verify_snapshot(con, folder, cutoff, settings)
    provenance = summary.provenance
    context.log.info(f"snapshot at {cutoff.isoformat()}: {summary.num_nodes} nodes, {summary.num_edges} edges; {provenance.describe()}")
    yield dg.MaterializeResult(
        metadata={
            "dagster/row_count": dg.MetadataValue.int(summary.num_edges),
            "num_nodes": dg.MetadataValue.int(summary.num_nodes),
            "num_edges": dg.MetadataValue.int(summary.num_edges),
            "rows_used": dg.MetadataValue.int(summary.rows_used),
            "cutoff": dg.MetadataValue.text(cutoff.isoformat()),
            "build": dg.MetadataValue.text(provenance.describe()),
            "incremental": dg.MetadataValue.bool(provenance.mode == "incremental"),
            "late_events": dg.MetadataValue.int(provenance.late_events),
            "first_late_day": dg.MetadataValue.text(provenance.first_late_day.isoformat() if provenance.first_late_day else ""),
            "stale_partitions": dg.MetadataValue.text(", ".join(state.parent.name for state in provenance.stale)),
            "nodes_per_type": dg.MetadataValue.md(_type_table(summary.nodes_per_type, "node type")),
            "edges_per_type": dg.MetadataValue.md(_type_table(summary.edges_per_type, "edge type")),
            "preview": _preview(folder),
            "plot": _plot(folder, summary),
            "path": dg.MetadataValue.path(str(folder)),
        }
    )
    for name, (passed, metadata) in checks.items():
        yield dg.AssetCheckResult(check_name=name, asset_key="graph_snapshot", passed=bool(passed), metadata=metadata)


@dg.asset(
    partitions_def=DAILY,
    deps=["events"],
    pool=WAREHOUSE_POOL,
    group_name="graph",
    kinds={"duckdb", "parquet"},
    owners=["team:hir"],
    description=(
        "Evaluation events after the cut-off T: validation [T, T + val_days) and test "
        "[T + val_days, T + val_days + test_days), one row per event with its split."
    ),
    check_specs=[
        dg.AssetCheckSpec(
            "windows_disjoint", asset="eval_windows", blocking=True,
            description="no window event before T; validation and test rows inside their own bounds",
        ),
    ],
)
def eval_windows(context: dg.AssetExecutionContext, warehouse: Warehouse, artifacts: ArtifactStore, hir_settings: SettingsResource):
    from hir.graph.snapshot import build_windows, verify_windows

    settings = hir_settings.get()
    cutoff = cutoff_of(context.partition_key)
    with warehouse.connect(read_only=True) as con, artifacts.write_partition("eval_windows", context.partition_key) as out:
        meta = build_windows(con, cutoff, settings, out)
    folder = artifacts.catalogue.windows_dir(context.partition_key)
    with warehouse.connect(read_only=True) as con:
        passed, check_metadata = verify_windows(con, folder, cutoff, settings)
    table = markdown_table(["split", "from", "to", "rows"], [
        ("validation", meta["cutoff_iso"], meta["test_start_iso"], meta["validation_rows"]),
        ("test", meta["test_start_iso"], meta["test_end_iso"], meta["test_rows"]),
    ], {"rows": ","})
    yield dg.MaterializeResult(
        metadata={
            "dagster/row_count": dg.MetadataValue.int(meta["validation_rows"] + meta["test_rows"]),
            "validation_rows": dg.MetadataValue.int(meta["validation_rows"]),
            "test_rows": dg.MetadataValue.int(meta["test_rows"]),
            "cutoff": dg.MetadataValue.text(meta["cutoff_iso"]),
            "windows": dg.MetadataValue.md(table),
            "path": dg.MetadataValue.path(str(folder)),
        }
    )
    yield dg.AssetCheckResult(check_name="windows_disjoint", asset_key="eval_windows", passed=bool(passed), metadata=check_metadata)
