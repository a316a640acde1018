"""Temporal graph snapshots and evaluation windows, built in DuckDB (DESIGN §5).

For a cut-off ``T`` the snapshot holds only events with ``ts < T`` and relations with
``valid_from < T``. Events are aggregated per ``(src, dst, edge_type = event_type)`` into

* ``count``   — the number of events,
* ``last_ts`` — the newest event time,
* ``weight``  — ``Σ 2^(-(T - ts) / h)`` with ``h`` the edge type's half-life in days
  (``Settings.half_life``), so an event at ``T - h`` weighs ½ and one at ``T - 2h`` weighs ¼.

A relation valid before ``T`` is an edge of type ``relation`` with count 1, weight 1 and
``last_ts = valid_from`` (one without ``valid_from`` is in no snapshot; every adapter sets it).

Sequences become edges too: for each user and each event type of ``Settings.sequence_events``
(purchases by default), every event before ``T`` whose predecessor in that user's sequence (by
``ts``, then ``dst``) was another item adds one transition ``previous item → item`` of type
``followed_by``, aggregated and decayed like events (at the later event's time). Without them the
graph knows which users share items but not what follows what.

The node table holds every entity first seen before ``T`` or touched by
an edge, in ``entity_id`` order (row ``i`` is node ``i``), with

* ``degree``   — the number of edges it is an endpoint of (a self-loop counts twice, as in the
  symmetric CSR of :func:`hir.models.graph.load_snapshot`),
* ``age_days`` — ``(T - first seen) / 1 day``, first seen being the earlier of the entity's
  ``first_seen`` and its oldest edge,
* ``activity`` — events in ``[T - 7 days, T)`` it is an endpoint of.

Type ids come from the sorted type names of the whole warehouse, so they are stable across
partitions. The layout of the written files is documented in :mod:`hir.models.graph`.

Every value reaches SQL as a named parameter (``$cutoff`` …) or as a registered table; the SQL
texts below are constants. Output paths are parameters too, ``COPY (…) TO $path``: DuckDB ≥ 1.4
binds the copy target like any other parameter (duckdb/duckdb#18795; older releases needed the
path spliced into the text), and the tests write through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow as pa

from hir.settings import Settings
from hir.storage import write_json

ACTIVITY_DAYS = 7
FOLLOWED_BY = "followed_by"  # the edge type of sequence transitions

# The half-lives from the settings, registered per call: (edge_type, half_life_days).
HALF_LIVES = "snapshot_half_lives"

# Edge types over the whole warehouse, so ids are stable across partitions: 0-based id in name
# order and the half-life in days (the setting's default for a type it does not list).
# followed_by is a type whenever sequence events are configured, whether or not any occur yet.
EDGE_TYPES = f"""
SELECT t.edge_type,
       row_number() OVER (ORDER BY t.edge_type) - 1 AS edge_type_id,
       coalesce(h.half_life_days, $default_half_life) AS half_life_days
FROM (SELECT event_type AS edge_type FROM events UNION SELECT relation FROM relations
      UNION SELECT '{FOLLOWED_BY}' WHERE len(CAST($sequence_events AS VARCHAR[])) > 0) t
LEFT JOIN snapshot_half_lives h USING (edge_type)
"""

# Transitions before the cut-off: each sequence event whose predecessor (same user and event type)
# was another item, as (previous item, item, ts of the later event).
TRANSITIONS = """
SELECT previous AS src, dst, ts
FROM (SELECT dst, ts, lag(dst) OVER (PARTITION BY src, event_type ORDER BY ts, dst) AS previous
      FROM events
      WHERE ts < $cutoff AND list_contains(CAST($sequence_events AS VARCHAR[]), event_type))
WHERE previous IS NOT NULL AND previous <> dst
"""

# One row per event or relation before the cut-off, with its decayed weight; types as ids.
EDGE_ROWS = f"""
SELECT e.src, e.dst, t.edge_type_id, e.ts,
       pow(2.0, (epoch(e.ts) - epoch($cutoff)) / (86400.0 * t.half_life_days)) AS weight
FROM events e
JOIN snap_edge_types t ON t.edge_type = e.event_type
WHERE e.ts < $cutoff
UNION ALL
SELECT r.src, r.dst, t.edge_type_id, min(r.valid_from), 1.0
FROM relations r
JOIN snap_edge_types t ON t.edge_type = r.relation
WHERE r.valid_from < $cutoff
GROUP BY r.src, r.dst, t.edge_type_id
UNION ALL
SELECT q.src, q.dst, t.edge_type_id, q.ts,
       pow(2.0, (epoch(q.ts) - epoch($cutoff)) / (86400.0 * t.half_life_days))
FROM ({TRANSITIONS}) q
JOIN snap_edge_types t ON t.edge_type = '{FOLLOWED_BY}'
"""

# Edges in entity ids: one row per (src, dst, edge_type_id).
EDGES = f"""
SELECT src, dst, edge_type_id,
       count(*) AS count,
       max(ts) AS last_ts,
       min(ts) AS first_ts,
       sum(weight) AS weight
FROM ({EDGE_ROWS})
GROUP BY src, dst, edge_type_id
"""

# The same with type names, as the benchmark writes them.
NAMED_EDGES = f"""
SELECT g.src, g.dst, t.edge_type, g.count, g.last_ts, g.first_ts, g.weight
FROM ({EDGES}) g
JOIN snap_edge_types t USING (edge_type_id)
"""

# Node types over the whole warehouse (0-based ids in name order).
NODE_TYPES = """
SELECT entity_type, row_number() OVER (ORDER BY entity_type) - 1 AS type_id
FROM (SELECT DISTINCT entity_type FROM entities)
"""

# Nodes: entities first seen before the cut-off or touched by an edge, numbered by entity_id.
NODES = """
WITH endpoints AS (
    SELECT src AS entity_id, first_ts FROM snap_edges
    UNION ALL
    SELECT dst, first_ts FROM snap_edges
), touched AS (
    SELECT entity_id, count(*) AS degree, min(first_ts) AS first_ts
    FROM endpoints GROUP BY entity_id
), recent AS (
    SELECT entity_id, count(*) AS activity
    FROM (SELECT src AS entity_id FROM events WHERE ts >= $activity_start AND ts < $cutoff
          UNION ALL
          SELECT dst FROM events WHERE ts >= $activity_start AND ts < $cutoff)
    GROUP BY entity_id
)
SELECT row_number() OVER (ORDER BY e.entity_id) - 1 AS node,
       e.entity_id, e.entity_type, t.type_id,
       coalesce(touched.degree, 0) AS degree,
       greatest(epoch($cutoff) - epoch(least(e.first_seen, touched.first_ts)), 0) / 86400.0 AS age_days,
       coalesce(recent.activity, 0) AS activity
FROM entities e
JOIN snap_node_types t USING (entity_type)
LEFT JOIN touched USING (entity_id)
LEFT JOIN recent USING (entity_id)
WHERE e.first_seen < $cutoff OR touched.entity_id IS NOT NULL
"""

NODES_FILE = """
SELECT entity_id, entity_type, type_id, degree, age_days, activity
FROM snap_nodes ORDER BY node
"""

# Edges in node indices; a LEFT JOIN keeps an edge whose endpoint is missing (as NULL) so the
# endpoint check fails loudly instead of the edge vanishing.
EDGES_FILE = """
SELECT s.node AS src, d.node AS dst, t.edge_type, g.edge_type_id,
       g.count, epoch(g.last_ts) AS last_ts, g.weight
FROM snap_edges g
JOIN snap_edge_types t USING (edge_type_id)
LEFT JOIN snap_nodes s ON s.entity_id = g.src
LEFT JOIN snap_nodes d ON d.entity_id = g.dst
ORDER BY src, dst, edge_type_id
"""

# What the snapshot used: events, relations and transitions (the edge counts), and the newest of them.
USED = "SELECT coalesce(sum(count), 0), max(last_ts) FROM snap_edges"

# Evaluation windows: validation [T, T + v), test [T + v, T + v + t).
WINDOWS = """
SELECT src, dst, event_type, ts, value,
       CASE WHEN ts < $test_start THEN 'validation' ELSE 'test' END AS split
FROM events
WHERE ts >= $cutoff AND ts < $test_end
ORDER BY ts, src, dst, event_type
"""

# Checks re-read the written files, never the temp tables that produced them.
SNAPSHOT_FILE_STATS = """
SELECT count(*) AS edges,
       max(last_ts) AS max_last_ts,
       coalesce(sum(count), 0) AS total_count,
       count(*) FILTER (WHERE src IS NULL OR dst IS NULL
                        OR src < 0 OR src >= $num_nodes OR dst < 0 OR dst >= $num_nodes) AS bad_endpoints
FROM read_parquet($path)
"""

# What the edge counts must add up to: every event, distinct relation and transition before T.
ROWS_BEFORE = f"""
SELECT (SELECT count(*) FROM events WHERE ts < $cutoff)
     + (SELECT count(*) FROM (SELECT DISTINCT src, dst, relation FROM relations WHERE valid_from < $cutoff))
     + (SELECT count(*) FROM ({TRANSITIONS}))
"""

WINDOW_FILE_STATS = """
SELECT count(*) AS rows,
       min(ts) AS min_ts,
       max(ts) AS max_ts,
       count(*) FILTER (WHERE split = 'validation' AND NOT (ts >= $cutoff AND ts < $test_start)) AS bad_validation,
       count(*) FILTER (WHERE split = 'test' AND NOT (ts >= $test_start AND ts < $test_end)) AS bad_test,
       count(*) FILTER (WHERE split NOT IN ('validation', 'test')) AS bad_split,
       count(*) FILTER (WHERE split = 'validation') AS validation,
       count(*) FILTER (WHERE split = 'test') AS test
FROM read_parquet($path)
"""


@dataclass(frozen=True)
class SnapshotSummary:
    """What one snapshot holds: counts per type, events + relations used and the newest time among them."""

    cutoff: datetime
    num_nodes: int
    num_edges: int
    nodes_per_type: dict[str, int]
    edges_per_type: dict[str, int]
    rows_used: int
    max_ts: datetime | None


def configure(con: duckdb.DuckDBPyConnection, settings: Settings) -> None:
    """Give DuckDB the configured threads and memory cap (``Settings.threads``, ``duckdb_memory_limit``)."""
    con.execute("SET threads = ?", [settings.threads])
    con.execute("SET memory_limit = ?", [settings.duckdb_memory_limit])


def prepare_edge_types(con: duckdb.DuckDBPyConnection, settings: Settings) -> None:
    """Create the temp table ``snap_edge_types(edge_type, edge_type_id, half_life_days)``.

    The half-lives of ``settings.half_life_days`` are registered as a small Arrow table for the
    join; a type they do not list gets ``settings.default_half_life_days``. ``followed_by`` is a
    type when ``settings.sequence_events`` names any event type.
    """
    types = sorted(settings.half_life_days)
    table = pa.table(
        {
            "edge_type": pa.array(types, pa.string()),
            "half_life_days": pa.array([settings.half_life(t) for t in types], pa.float64()),
        }
    )
    con.register(HALF_LIVES, table)
    try:
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE snap_edge_types AS {EDGE_TYPES}",
            {"default_half_life": float(settings.default_half_life_days), "sequence_events": settings.sequence_event_types},
        )
    finally:
        con.unregister(HALF_LIVES)


def copy_to_parquet(con: duckdb.DuckDBPyConnection, query: str, path: Path, params: dict | None = None) -> None:
    """``COPY (query) TO path`` as Parquet (DuckDB's default snappy); ``query`` is one of this module's constants."""
    con.execute(f"COPY ({query}) TO $path (FORMAT parquet)", {**(params or {}), "path": str(path)})


def edge_params(cutoff: datetime, settings: Settings) -> dict:
    """The parameters of :data:`EDGES`, :data:`NAMED_EDGES` and :data:`ROWS_BEFORE`."""
    return {"cutoff": cutoff, "sequence_events": settings.sequence_event_types}


def build_snapshot(con: duckdb.DuckDBPyConnection, cutoff: datetime, settings: Settings, out_dir: str | Path) -> SnapshotSummary:
    """Write ``nodes.parquet``, ``edges.parquet`` and ``meta.json`` for ``cutoff`` into ``out_dir``.

    Args:
        con: a connection to the warehouse (read-only is enough; temp tables are used).
        cutoff: the timezone-aware cut-off ``T``; nothing at or after it is used.
        settings: half-lives (``half_life_days``, ``default_half_life_days``), the event types that
            form sequences (``sequence_events``), threads, memory cap.
        out_dir: an existing folder, normally the scratch folder of ``ArtifactStore.write_partition``.
    """
    out_dir = Path(out_dir)
    configure(con, settings)
    try:
        prepare_edge_types(con, settings)
        con.execute(f"CREATE OR REPLACE TEMP TABLE snap_edges AS {EDGES}", edge_params(cutoff, settings))
        con.execute(f"CREATE OR REPLACE TEMP TABLE snap_node_types AS {NODE_TYPES}")
        node_params = {"cutoff": cutoff, "activity_start": cutoff - timedelta(days=ACTIVITY_DAYS)}
        con.execute(f"CREATE OR REPLACE TEMP TABLE snap_nodes AS {NODES}", node_params)
        copy_to_parquet(con, NODES_FILE, out_dir / "nodes.parquet")
        copy_to_parquet(con, EDGES_FILE, out_dir / "edges.parquet")
        summary = _summarise(con, cutoff)
        meta = _meta(con, summary)
    finally:
        for table in ("snap_edges", "snap_node_types", "snap_edge_types", "snap_nodes"):
            con.execute(f"DROP TABLE IF EXISTS {table}")
    write_json(out_dir / "meta.json", meta)
    return summary


def _summarise(con: duckdb.DuckDBPyConnection, cutoff: datetime) -> SnapshotSummary:
    nodes = dict(con.execute("SELECT entity_type, count(*) FROM snap_nodes GROUP BY ALL ORDER BY 1").fetchall())
    edges = dict(
        con.execute(
            "SELECT t.edge_type, count(*) FROM snap_edges JOIN snap_edge_types t USING (edge_type_id) GROUP BY ALL ORDER BY 1"
        ).fetchall()
    )
    used, newest = con.execute(USED).fetchone()
    return SnapshotSummary(
        cutoff=cutoff,
        num_nodes=sum(nodes.values()),
        num_edges=sum(edges.values()),
        nodes_per_type=nodes,
        edges_per_type=edges,
        rows_used=int(used),
        max_ts=newest,
    )


def _meta(con: duckdb.DuckDBPyConnection, summary: SnapshotSummary) -> dict:
    node_types = [r[0] for r in con.execute("SELECT entity_type FROM snap_node_types ORDER BY type_id").fetchall()]
    edge_types = con.execute("SELECT edge_type, half_life_days FROM snap_edge_types ORDER BY edge_type_id").fetchall()
    return {
        "cutoff": summary.cutoff.timestamp(),
        "cutoff_iso": summary.cutoff.isoformat(),
        "node_types": node_types,
        "edge_types": [name for name, _ in edge_types],
        "half_life_days": dict(edge_types),
        "num_nodes": summary.num_nodes,
        "num_edges": summary.num_edges,
        "nodes_per_type": summary.nodes_per_type,
        "edges_per_type": summary.edges_per_type,
        "rows_used": summary.rows_used,
        "max_ts": summary.max_ts.timestamp() if summary.max_ts else None,
    }


def window_bounds(cutoff: datetime, settings: Settings) -> dict[str, datetime]:
    """``cutoff``, ``test_start = T + val_days`` and ``test_end = T + val_days + test_days``."""
    test_start = cutoff + timedelta(days=settings.val_days)
    return {"cutoff": cutoff, "test_start": test_start, "test_end": test_start + timedelta(days=settings.test_days)}


def build_windows(con: duckdb.DuckDBPyConnection, cutoff: datetime, settings: Settings, out_dir: str | Path) -> dict:
    """Write ``windows.parquet`` (validation and test events after ``cutoff``) and ``meta.json``.

    Args:
        con: a connection to the warehouse.
        cutoff: the cut-off ``T``; validation is ``[T, T + val_days)``, test the ``test_days`` after.
        settings: ``val_days``, ``test_days``, threads and memory cap.
        out_dir: an existing folder, normally the scratch folder of ``ArtifactStore.write_partition``.

    Returns the meta dict written to ``meta.json`` (bounds as ISO strings and unix seconds, row counts).
    """
    out_dir = Path(out_dir)
    configure(con, settings)
    bounds = window_bounds(cutoff, settings)
    copy_to_parquet(con, WINDOWS, out_dir / "windows.parquet", bounds)
    stats = _stats(con, WINDOW_FILE_STATS, {**bounds, "path": str(out_dir / "windows.parquet")})
    meta = {
        **{f"{k}_iso": v.isoformat() for k, v in bounds.items()},
        **{k: v.timestamp() for k, v in bounds.items()},
        "validation_rows": stats["validation"],
        "test_rows": stats["test"],
    }
    write_json(out_dir / "meta.json", meta)
    return meta


def _stats(con: duckdb.DuckDBPyConnection, query: str, params: dict) -> dict:
    cur = con.execute(query, params)
    names = [d[0] for d in cur.description]
    return dict(zip(names, cur.fetchone()))


def verify_snapshot(con: duckdb.DuckDBPyConnection, folder: str | Path, cutoff: datetime,
                    settings: Settings) -> dict[str, tuple[bool, dict]]:
    """Re-read a written snapshot and check it against the warehouse.

    Returns ``{check name: (passed, metadata)}`` for

    * ``no_future_events``: every edge's ``last_ts < T``, and the edge counts add up to exactly the
      events, distinct relations and transitions before ``T`` (so nothing later slipped in);
    * ``edge_endpoints_exist``: every ``src``/``dst`` is a row of ``nodes.parquet``.

    Args:
        con: a connection to the warehouse the snapshot was built from.
        folder: the snapshot folder (``nodes.parquet``, ``edges.parquet``).
        cutoff: the snapshot's cut-off ``T``.
        settings: the event types that form sequences (``sequence_events``), as the snapshot was built.
    """
    folder = Path(folder)
    num_nodes = con.execute("SELECT count(*) FROM read_parquet(?)", [str(folder / "nodes.parquet")]).fetchone()[0]
    stats = _stats(con, SNAPSHOT_FILE_STATS, {"path": str(folder / "edges.parquet"), "num_nodes": num_nodes})
    expected = con.execute(ROWS_BEFORE, edge_params(cutoff, settings)).fetchone()[0]
    newest = stats["max_last_ts"]
    before = newest is None or newest < cutoff.timestamp()
    return {
        "no_future_events": (
            before and stats["total_count"] == expected,
            {"max_last_ts": newest if newest is not None else 0.0, "cutoff": cutoff.timestamp(),
             "edge_count_sum": int(stats["total_count"]), "rows_before_cutoff": int(expected)},
        ),
        "edge_endpoints_exist": (
            stats["bad_endpoints"] == 0,
            {"edges": int(stats["edges"]), "nodes": int(num_nodes), "bad_endpoints": int(stats["bad_endpoints"])},
        ),
    }


def verify_windows(con: duckdb.DuckDBPyConnection, folder: str | Path, cutoff: datetime, settings: Settings) -> tuple[bool, dict]:
    """Check a written ``windows.parquet``: no row before ``T`` (disjoint from the training data),
    validation rows in ``[T, T + v)``, test rows in ``[T + v, T + v + t)`` (disjoint from each other).

    Args:
        con: any DuckDB connection.
        folder: the eval_windows folder.
        cutoff: the cut-off ``T``.
        settings: ``val_days`` and ``test_days``.
    """
    bounds = window_bounds(cutoff, settings)
    stats = _stats(con, WINDOW_FILE_STATS, {**bounds, "path": str(Path(folder) / "windows.parquet")})
    passed = (
        (stats["min_ts"] is None or stats["min_ts"] >= cutoff)
        and stats["bad_validation"] == 0 and stats["bad_test"] == 0 and stats["bad_split"] == 0
    )
    metadata = {k: (v.isoformat() if isinstance(v, datetime) else int(v)) for k, v in stats.items() if v is not None}
    return passed, metadata
