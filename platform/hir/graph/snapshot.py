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

**Incremental snapshots.** Every snapshot also writes its *edge state* (``state/`` in the
partition folder, see :func:`build_edge_state`): the event and transition edges in entity ids with
``count, first_ts, last_ts`` and the weight as of a *reference time* ``R``; each user's last item per
sequence event type (so the next window's first transition is known); and a fingerprint (event count
and a checksum) of every day before ``T``. Since ``2^(-(T'-ts)/h) = 2^(-(R-ts)/h) · 2^(-(T'-R)/h)``,
the edges at any cut-off ``T'`` are the stored ones summed per key with their weights multiplied once
by the decay from ``R`` to ``T'``: counts add, first/last times take the min/max. The edges are kept
as *parts*: a base part and two small delta parts per increment, all with weights as of the same
``R``. An increment therefore reads the events of ``[T, T')`` only and writes their rows (one per
event or transition, without the count 1 and the first time, which is the last: a day's events barely
aggregate) as new parts, the events' and the transitions' (written at once by two connections); the
earlier parts are hard links into the new state, not rewritten. The parts are merged when the
snapshot is written, and compacted into one base part (``R = T'``) after :data:`COMPACT_STEPS`
steps, when the edge types (and so their ids) changed, and before the weights
as of ``R`` would leave the range of ``exp()`` (:data:`MAX_EXPONENT`). That equals the full
recomputation (weights up to float rounding). A state is used
only if its half-lives, sequence event types and day checksum are the current ones and its day
fingerprints still match the warehouse: a late event that landed in an already covered day makes
it stale, and the snapshot is recomputed from the newest state before the first affected day (or
from scratch), which :class:`Provenance` reports. The warehouse's fingerprints are the loader's
table of days (``event_days``, :func:`hir.graph.warehouse.append_events`), so that a step reads no
event before its window; where that table does not account for every event (rows written past the
loader), or with ``Settings.snapshot_scan_days``, they come from a scan of the log.

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

import math
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Sequence

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from hir.graph.warehouse import DAY, DAY_CHECKSUM, EVENT_DAYS_OF, event_days_complete
from hir.settings import Settings
from hir.storage import (
    META_FILE,
    SNAPSHOT_EDGES_FILE,
    SNAPSHOT_NODES_FILE,
    WINDOWS_FILE,
    read_json,
    write_json,
)

ACTIVITY_DAYS = 7
FOLLOWED_BY = "followed_by"  # the edge type of sequence transitions
STATE_DIR = "state"  # the edge state inside a snapshot folder (see build_edge_state)
STATE_FILES = ("days.parquet", "state.json")  # and its edge and sequence parts (state.json)
BASE_PART = "edges.parquet"  # the edge part of a full rebuild or a compaction
BASE_SEQUENCES = "sequences.parquet"  # the sequence part of a full rebuild or a compaction
# A state made of this many steps (its base and the increments on it, one sequence part each) is
# compacted by the next step: merging the parts costs the snapshot a GROUP BY over all of them, a
# compaction costs the step one rewrite of the edge state.
COMPACT_STEPS = 7
# Parts are appended only while every decay exponent (T' - R) / h · ln 2 stays below this: the weights
# as of R of events after R grow as 2^((ts - R)/h), and exp() overflows past 709.
MAX_EXPONENT = 500.0
FULL_REBUILD_START = "-infinity"  # the window start of a full rebuild: all history
# The state files are written plain (no compression, no dictionary pages): about twice the size of
# DuckDB's default snappy + dictionary, written in under half the time; they are read once, the next day.
STATE_FORMAT = "(FORMAT parquet, COMPRESSION uncompressed, DICTIONARY_SIZE_LIMIT 1)"
# A base edge part (a full rebuild or a compaction: every edge) is written with Parquet v2's delta
# encodings, still uncompressed: ids and times shrink to a few bytes a row (805 MB → 342 MB for the
# bench's 15 M edges); the full rebuild is as fast at 1.5 M edges and 15–22 % faster at 15 M, where
# the plain file's writeback to disk was the cost. A delta part stays v1: each later merge read v2
# parts about 1 ms slower.
BASE_PART_FORMAT = STATE_FORMAT[:-1] + ", PARQUET_VERSION v2)"
# An increment's edge parts are written in row groups of 32 k rows, not DuckDB's 122,880: the writer
# holds a row group in memory, and in a snapshot's new connection that memory is freshly mapped, every
# page a fault; a day's events on the bench (178 k rows) are written in 8 ms so, 11 ms in big groups.
DELTA_PART_FORMAT = STATE_FORMAT[:-1] + ", ROW_GROUP_SIZE 32768)"

# The edge types of a stored state, registered while snap_state_types is made of them:
# (state_type_id, edge_type_id, rate), the state's type ids mapped to the current ones.
STATE_TYPES = "snapshot_state_types"

# The decay rate of a type: ln 2 / half-life, per microsecond.
RATE = "ln(2.0) / (86400e6 * half_life_days)"

# The names of the edge types over the whole warehouse: the event types of its day fingerprints
# (snap_event_days) and the relations. prepare_edge_types numbers them.
EDGE_TYPE_NAMES = "SELECT event_type FROM snap_event_days UNION SELECT relation FROM relations"

# The table of edge types from its columns as list parameters (computed by prepare_edge_types).
EDGE_TYPES = """
SELECT unnest(CAST($names AS VARCHAR[])) AS edge_type, unnest(CAST($ids AS BIGINT[])) AS edge_type_id,
       unnest(CAST($half_lives AS DOUBLE[])) AS half_life_days, unnest(CAST($rates AS DOUBLE[])) AS rate
"""

# The weight as of the reference time R (the cut-off, but in a delta part) of an event at ``ts`` whose
# type row is ``t``: 2^(-(R - ts)/h) as exp((ts - R) · rate) on integer microseconds, about a quarter
# of the work of pow() on epoch seconds.
WEIGHT = "exp((epoch_us({ts}) - epoch_us($reference)) * t.rate)"

# Transitions before the cut-off: each sequence event whose predecessor (same user and event type)
# was another item, as (previous item, item, ts of the later event). Only the no_future_events check
# uses it: it recounts the transitions from the whole log, independently of the edge state.
TRANSITIONS = """
SELECT previous AS src, dst, ts
FROM (SELECT dst, ts, lag(dst) OVER (PARTITION BY src, event_type ORDER BY ts, dst) AS previous
      FROM events
      WHERE ts < $cutoff AND list_contains(CAST($sequence_events AS VARCHAR[]), event_type))
WHERE previous IS NOT NULL AND previous <> dst
"""

# The events a step adds: those in [start, cutoff). A full rebuild starts at -infinity, an
# incremental step at the cut-off of the state it advances.
WINDOW = "ts >= CAST($start AS TIMESTAMPTZ) AND ts < $cutoff"

# Each user's last item per sequence event type in a stored state (by ts, then dst): the newest over its
# sequence parts.
STATE_SEQUENCES = """
SELECT src, event_type, last.dst AS dst, last.ts AS ts
FROM (SELECT src, event_type, max({'ts': ts, 'dst': dst}) AS last
      FROM read_parquet($sequence_parts)
      GROUP BY src, event_type)
"""

# The sequences of a step (snap_sequences), in one window function: each sequence event of the window
# (``fresh``) and the base's sequence rows before it ({previous}: none in a full rebuild, every user's in
# a compaction, the window's users' in an increment), with the item before it in its user's sequence of
# that type (by ts, then dst) and whether it is the last there. The base's rows of a user and type are
# the last items of each of its parts, all before the window: the newest of them (STATE_SEQUENCES) is
# the one the window puts before the user's first fresh event, so they are not aggregated first (that
# cost an increment 1.5 ms), and the ones before it only make transitions inside the base, which
# STEP_TRANSITIONS leaves out. The transitions and the new last items are both read from this one
# table: apart (two temp tables, a window for the transitions and an aggregation for the last items)
# they cost an increment several ms more, most of it the fixed cost of each DuckDB statement and
# operator on a day's few thousand rows. The window is read from the log twice (here and for the
# edges), not copied into a table first: a zone-mapped range scan of the warehouse costs less than
# writing and re-reading the copy.
SEQUENCES = f"""
WITH fresh AS (SELECT src, event_type, dst, ts
               FROM events
               WHERE {WINDOW} AND list_contains(CAST($sequence_events AS VARCHAR[]), event_type))
SELECT src, event_type, dst, ts, lag(dst) OVER w AS previous, lead(ts) OVER w IS NULL AS last
FROM (SELECT src, event_type, dst, ts FROM fresh{{previous}})
WINDOW w AS (PARTITION BY src, event_type ORDER BY ts, dst)
"""
# The {previous} of SEQUENCES from a base state: its sequence parts' rows, of the window's users only
# ({users} = WINDOW_USERS) or of all.
PREVIOUS = " UNION ALL SELECT src, event_type, dst, ts FROM read_parquet($sequence_parts) {users}"
WINDOW_USERS = "SEMI JOIN fresh USING (src, event_type)"

# Transitions whose later event lies in the window, as (previous item, item, ts of the later event):
# the first event of a user and type in the window follows that user's last item before it.
STEP_TRANSITIONS = """
SELECT previous AS src, dst, ts FROM snap_sequences
WHERE previous IS NOT NULL AND previous <> dst AND ts >= CAST($start AS TIMESTAMPTZ)
"""

# One row per event of the window with its type id and its decayed weight as of the reference time;
# {types} narrows the event types (to those named, or not named, followed_by).
EVENT_ROWS = f"""
SELECT e.src, e.dst, t.edge_type_id, e.ts, {WEIGHT.format(ts="e.ts")} AS weight
FROM events e
JOIN snap_edge_types t ON t.edge_type = e.event_type
WHERE {WINDOW} {{types}}
"""

# One row per transition of the window, with its decayed weight as of the reference time.
TRANSITION_ROWS = f"""
SELECT q.src, q.dst, t.edge_type_id, q.ts, {WEIGHT.format(ts="q.ts")} AS weight
FROM ({STEP_TRANSITIONS}) q
JOIN snap_edge_types t ON t.edge_type = '{FOLLOWED_BY}'
"""

# Rows aggregated per (src, dst, edge_type_id).
AGGREGATED = """
SELECT src, dst, edge_type_id,
       count(*) AS count,
       min(ts) AS first_ts,
       max(ts) AS last_ts,
       sum(weight) AS weight
FROM ({rows})
GROUP BY src, dst, edge_type_id
"""

# The window's event and transition edges in entity ids: one row per (src, dst, edge_type_id).
# Events and transitions are aggregated apart and the results put together, which costs a sixth less
# than one GROUP BY over their union; the keys of the two parts differ in their edge type (events of
# a type named followed_by, if any, are aggregated with the transitions).
STEP_EDGES = f"""
{AGGREGATED.format(rows=EVENT_ROWS.format(types=f"AND e.event_type <> '{FOLLOWED_BY}'"))}
UNION ALL
{AGGREGATED.format(rows=EVENT_ROWS.format(types=f"AND e.event_type = '{FOLLOWED_BY}'") + " UNION ALL " + TRANSITION_ROWS)}
"""

# An increment's edge rows, one per event or transition, not aggregated: two delta parts. A day's events
# aggregate into almost as many edges (about 1.3 events an edge on the bench's log), so aggregating them
# would cost more than it saves; the parts are summed per key when they are read (STATE_EDGES). A row's
# count (1) and first time (its last_ts) are left out: DuckDB's writer spends about 1.5 ms a column on a
# day's rows, and they said nothing. The events' part is written by a second connection while the first
# computes the sequences (build_edge_state), so it reads the edge types from their list parameters (a
# connection does not see another's temp tables); the transitions' part follows the sequences.
EVENT_PART = f"""
WITH snap_edge_types AS ({EDGE_TYPES})
SELECT src, dst, edge_type_id, ts AS last_ts, weight FROM ({EVENT_ROWS.format(types="")})
"""
TRANSITION_PART = f"SELECT src, dst, edge_type_id, ts AS last_ts, weight FROM ({TRANSITION_ROWS})"

# A stored state's types (registered as STATE_TYPES) with their decay rates.
STATE_TYPE_RATES = f"SELECT state_type_id, edge_type_id, {RATE} AS rate FROM {STATE_TYPES}"

# A stored state's edges at the cut-off, in the type ids of snap_state_types: its parts summed per
# key, the summed weight (as of the state's reference time) decayed to the cut-off by one multiplication.
# The parts are read by column name: a delta part has no count and first_ts (NULL here), its rows
# count 1 and start at their last_ts; the base part has every column.
STATE_EDGES = """
SELECT s.src, s.dst, m.edge_type_id,
       CAST(sum(coalesce(s.count, 1)) AS BIGINT) AS count, min(coalesce(s.first_ts, s.last_ts)) AS first_ts,
       max(s.last_ts) AS last_ts,
       sum(s.weight) * exp((epoch_us($state_reference) - epoch_us($cutoff)) * m.rate) AS weight
FROM read_parquet($parts, union_by_name = true) s
JOIN snap_state_types m ON m.state_type_id = s.edge_type_id
GROUP BY s.src, s.dst, m.edge_type_id, m.rate
"""

# Two edge sets merged per (src, dst, edge_type_id), ``a`` FULL JOIN ``b``: counts add, first and
# last times take the min and max (least and greatest skip NULL), weights add.
MERGED_EDGE = """
SELECT src, dst, edge_type_id,
       coalesce(a.count, 0) + coalesce(b.count, 0) AS count,
       least(a.first_ts, b.first_ts) AS first_ts,
       greatest(a.last_ts, b.last_ts) AS last_ts,
       coalesce(a.weight, 0.0) + coalesce(b.weight, 0.0) AS weight
"""

# A compaction: the stored state at the cut-off merged with the window's edges into one base part.
ADVANCED_EDGES = f"""
{MERGED_EDGE}
FROM ({STATE_EDGES}) a
FULL JOIN ({STEP_EDGES}) b USING (src, dst, edge_type_id)
"""

# Each user's last item per sequence event type before the cut-off: all users in a base part, only the
# window's in a delta part (a sequence part per increment, like the edges).
STEP_SEQUENCES = "SELECT src, event_type, dst, ts FROM snap_sequences WHERE last"

# The fingerprint of every UTC day of the events before $before (see hir.graph.warehouse): the
# whole days from snap_event_days, the day of $before up to it (where $before is not midnight) from a
# range scan of that day. A state records them and the checksum it was built with (state.json): one
# built with another checksum is not compatible, rather than all stale. The two parts hold different
# days, so each is grouped alone: the whole days' grouping then runs over the known range of days
# (a perfect hash aggregate), not as a hash aggregate of the union, a millisecond each time.
DAYS_BEFORE = f"""
SELECT day, CAST(sum(events) AS BIGINT) AS events, bit_xor(checksum) AS checksum
FROM snap_event_days WHERE day < $before_day GROUP BY day
UNION ALL
SELECT {DAY} AS day, count(*) AS events, {DAY_CHECKSUM} AS checksum
FROM events WHERE ts >= $before_day_start AND ts < $before GROUP BY 1
"""

# The days before a stored state's cut-off whose events differ from its fingerprints now (late
# events), oldest first, with the number of events added since.
CHANGED_DAYS = f"""
SELECT day, coalesce(c.events, 0) - coalesce(s.events, 0) AS added
FROM ({DAYS_BEFORE}) c
FULL JOIN read_parquet($state_days) s USING (day)
WHERE c.events IS DISTINCT FROM s.events OR c.checksum IS DISTINCT FROM s.checksum
ORDER BY day
"""

# Relations valid before the cut-off as edges (count 1, weight 1, last_ts = valid_from).
RELATION_EDGES = """
SELECT r.src, r.dst, t.edge_type_id, CAST(1 AS BIGINT) AS count,
       min(r.valid_from) AS first_ts, min(r.valid_from) AS last_ts, CAST(1.0 AS DOUBLE) AS weight
FROM relations r
JOIN snap_edge_types t ON t.edge_type = r.relation
WHERE r.valid_from < $cutoff
GROUP BY r.src, r.dst, t.edge_type_id
"""

# The snapshot's edges: the written state's (snap_state_edges: its base part, or its parts merged) and
# the relations' (they share a key only where a relation is named like an event type).
SNAPSHOT_EDGES = f"""
{MERGED_EDGE}
FROM snap_state_edges a FULL JOIN snap_relation_edges b USING (src, dst, edge_type_id)
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
class EdgeState:
    """An edge state on disk (see :func:`build_edge_state`): its folder and what ``state.json`` records."""

    folder: Path
    cutoff: datetime
    reference: datetime  # the time the stored weights are as of
    edge_parts: list[str]  # the edge files in the folder, base part first
    sequence_parts: list[str]  # the sequence files in the folder, base part first
    edge_types: list[str]  # by state type id
    half_life_days: dict[str, float]
    sequence_events: list[str]
    day_checksum: str | None  # the DAY_CHECKSUM its day fingerprints were computed with


@dataclass(frozen=True)
class Provenance:
    """How a snapshot's edges were computed.

    ``mode`` is ``"full"`` (from the whole event log) or ``"incremental"`` (the state at
    ``base_cutoff`` advanced by the events of ``[base_cutoff, T)``). ``first_late_day`` is the first
    day, if any, in which events arrived after a newer state covering it was written; those states
    (``stale``, newest first) were passed over and ``late_events`` counts the events added to them.
    """

    mode: str
    base_cutoff: datetime | None = None
    first_late_day: date | None = None
    late_events: int = 0
    stale: tuple[Path, ...] = ()

    def describe(self) -> str:
        """One line for the asset metadata."""
        if self.mode == "full":
            text = "full rebuild from the whole event log"
        else:
            text = f"incremental from the state at {self.base_cutoff.isoformat()}"
        if self.first_late_day is not None:
            text += (f"; {self.late_events} late event(s) from {self.first_late_day.isoformat()} made "
                     f"{len(self.stale)} newer state(s) stale, so it recomputed from that day")
        return text


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
    provenance: Provenance  # full rebuild or increment, late events


def configure(con: duckdb.DuckDBPyConnection, settings: Settings) -> None:
    """Give DuckDB the configured threads, memory cap and spill folder (``Settings.threads``,
    ``duckdb_memory_limit``, ``duckdb_temp_directory``); past the cap, joins, aggregates and sorts
    spill there. Insertion order is not kept where a query has no ORDER BY (less memory)."""
    con.execute("SET threads = ?", [settings.threads])
    con.execute("SET memory_limit = ?", [settings.duckdb_memory_limit])
    spill = Path(settings.duckdb_temp_directory or settings.data_home / "tmp" / "duckdb")
    spill.mkdir(parents=True, exist_ok=True)  # DuckDB creates only the last level
    con.execute("SET temp_directory = ?", [str(spill)])
    con.execute("SET preserve_insertion_order = false")


def prepare_event_days(con: duckdb.DuckDBPyConnection, settings: Settings) -> None:
    """``snap_event_days(day, event_type, events, checksum)``: the warehouse's day fingerprints
    (``event_days``, kept by the loader) where they account for every event, else computed from a
    scan of the whole log, as always with ``settings.snapshot_scan_days`` (which also sees an event
    edited in place outside the loader)."""
    if not settings.snapshot_scan_days and event_days_complete(con):
        con.execute("CREATE OR REPLACE TEMP TABLE snap_event_days AS SELECT * FROM event_days")
    else:
        con.execute(f"CREATE OR REPLACE TEMP TABLE snap_event_days AS {EVENT_DAYS_OF.format(table='events')}")


def drop_event_days(con: duckdb.DuckDBPyConnection) -> None:
    """Remove what :func:`prepare_event_days` made."""
    con.execute("DROP TABLE IF EXISTS snap_event_days")


def _days_before(before: datetime) -> dict:
    """The parameters of :data:`DAYS_BEFORE`: ``before``, its UTC day (days since 1970) and that day's start."""
    day = (before - _EPOCH) // timedelta(days=1)
    return {"before": before, "before_day": day, "before_day_start": _day_start(day)}


def prepare_edge_types(con: duckdb.DuckDBPyConnection, settings: Settings) -> list[tuple[str, float, float]]:
    """Create the temp table ``snap_edge_types(edge_type, edge_type_id, half_life_days, rate)`` (after
    :func:`prepare_event_days`, whose event types it reads) and return its rows by id as
    ``(edge_type, half_life_days, rate)``, for every use of a step in Python.

    The types are those of the whole warehouse (:data:`EDGE_TYPE_NAMES`), so ids are stable across
    partitions: 0-based in name order. ``followed_by`` is a type whenever ``settings.sequence_events``
    names an event type, whether or not any transition occurs yet. A type ``settings.half_life_days``
    does not list gets ``settings.default_half_life_days``; the decay rate is :data:`RATE` (the same
    double: ln 2, then the product, then the quotient). Numbered here rather than in SQL, the step
    saves about 0.7 ms, most of it binding the half-lives as a MAP.
    """
    names = {name for (name,) in con.execute(EDGE_TYPE_NAMES).fetchall()}
    if settings.sequence_event_types:
        names.add(FOLLOWED_BY)
    types = [(name, settings.half_life(name), math.log(2.0) / (86400e6 * settings.half_life(name))) for name in sorted(names)]
    con.execute(f"CREATE OR REPLACE TEMP TABLE snap_edge_types AS {EDGE_TYPES}", _edge_type_values(types))
    return types


def _edge_type_values(types: list[tuple[str, float, float]]) -> dict:
    """The parameters of :data:`EDGE_TYPES` for the rows of :func:`prepare_edge_types`."""
    return {"names": [name for name, _, _ in types], "ids": list(range(len(types))),
            "half_lives": [half_life for _, half_life, _ in types], "rates": [rate for _, _, rate in types]}


def copy_to_parquet(con: duckdb.DuckDBPyConnection, query: str, path: Path, params: dict | None = None) -> None:
    """``COPY (query) TO path`` as Parquet (DuckDB's default snappy); ``query`` is one of this module's constants."""
    con.execute(f"COPY ({query}) TO $path (FORMAT parquet)", {**(params or {}), "path": str(path)})


def _bind(query: str, values: dict) -> dict:
    """The entries of ``values`` that ``query`` names as ``$parameter`` (DuckDB refuses unused ones)."""
    return {k: v for k, v in values.items() if f"${k}" in query}


def edge_params(cutoff: datetime, settings: Settings) -> dict:
    """The parameters of :data:`ROWS_BEFORE`."""
    return {"cutoff": cutoff, "sequence_events": settings.sequence_event_types}


def read_state(folder: str | Path) -> EdgeState | None:
    """The edge state stored in ``folder``, or None where there is none (or an incomplete one)."""
    folder = Path(folder)
    if not all((folder / name).is_file() for name in STATE_FILES):
        return None
    meta = read_json(folder / "state.json")
    parts = meta.get("edge_parts")  # None: a state from before edge parts, rebuilt
    sequence_parts = meta.get("sequence_parts", [BASE_SEQUENCES])
    if parts is None or not all((folder / name).is_file() for name in [*parts, *sequence_parts]):
        return None
    return EdgeState(
        folder=folder,
        cutoff=datetime.fromisoformat(meta["cutoff_iso"]),
        reference=datetime.fromisoformat(meta["reference_iso"]),
        edge_parts=list(parts),
        sequence_parts=list(sequence_parts),
        edge_types=list(meta["edge_types"]),
        half_life_days={k: float(v) for k, v in meta["half_life_days"].items()},
        sequence_events=list(meta["sequence_events"]),
        day_checksum=meta.get("day_checksum"),
    )


def _compatible(state: EdgeState, settings: Settings, types: list[tuple[str, float, float]]) -> bool:
    """Whether ``state`` was built with today's half-lives (``types``, see :func:`prepare_edge_types`),
    sequence event types and day checksum (all its types still exist)."""
    current = {name: half_life for name, half_life, _ in types}
    return state.sequence_events == settings.sequence_event_types and state.day_checksum == DAY_CHECKSUM and all(
        t in current and current[t] == state.half_life_days.get(t) for t in state.edge_types
    )


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _day_start(day: int) -> datetime:
    return _EPOCH + timedelta(days=day)


def choose_base(con: duckdb.DuckDBPyConnection, cutoff: datetime, settings: Settings, states: Sequence[str | Path],
                types: list[tuple[str, float, float]]) -> tuple[EdgeState | None, Provenance]:
    """The newest usable state among ``states`` (folders, newest first) for a snapshot at ``cutoff``, with
    the current edge ``types`` (:func:`prepare_edge_types`).

    A state is usable when its cut-off is before ``cutoff``, it was built with the current
    half-lives, sequence event types and day checksum, and the fingerprint of every day before its
    cut-off still matches the warehouse (:data:`CHANGED_DAYS`). When a state's days changed (late
    events), only states whose cut-off is at or before the first changed day's start are tried
    next; the ones passed over are reported stale. Without a usable state the answer is ``None`` and
    a full rebuild.
    """
    limit, stale, first_late, late = cutoff, [], None, 0
    for folder in states:
        state = read_state(folder)
        if state is None or not state.cutoff < cutoff or not _compatible(state, settings, types):
            continue
        if state.cutoff > limit:  # it covers the first changed day too
            stale.append(state.folder)
            continue
        changed = con.execute(CHANGED_DAYS, {**_days_before(state.cutoff), "state_days": str(state.folder / "days.parquet")}).fetchall()
        if not changed:
            mode = Provenance("incremental", state.cutoff, first_late and first_late.date(), late, tuple(stale))
            return state, mode
        stale.append(state.folder)
        first_day = _day_start(changed[0][0])
        if first_late is None:
            late = int(sum(added for _, added in changed))
        first_late = first_day if first_late is None else min(first_late, first_day)
        limit = min(limit, first_day)
    return None, Provenance("full", None, first_late and first_late.date(), late, tuple(stale))


def build_edge_state(con: duckdb.DuckDBPyConnection, cutoff: datetime, settings: Settings, folder: str | Path,
                     states: Sequence[str | Path] = ()) -> Provenance:
    """Compute the edge state at ``cutoff`` and write it into ``folder`` (created), from a stored
    state where one is usable.

    With ``settings.snapshot_incremental`` and a usable state among ``states`` (see
    :func:`choose_base`) only the events in ``[state cut-off, cutoff)`` are read; otherwise the whole
    log is; the day fingerprints come from the warehouse's table of days (:func:`prepare_event_days`).
    The results stream from the queries into the files (materialising them in DuckDB first would
    cost about as much again). An increment writes the window's event and transition rows as two
    more parts beside hard links to the base state's parts (:func:`_appendable`, :data:`EVENT_PART`,
    written on a second connection while this one computes the sequences, and :data:`TRANSITION_PART`);
    otherwise, and after :data:`COMPACT_STEPS` steps, the edges are aggregated into one base part.
    Files, all Parquet but ``state.json``:

    * the edge parts (``edges.parquet``, then ``edges-1.parquet``, ``edges-1-transitions.parquet`` …):
      ``src, dst, edge_type_id, count,
      first_ts, last_ts, weight`` — event and transition edges (no relations) in entity ids, the weight
      as of the reference time; a key can be in several parts, and several times in a delta part, whose
      rows are single events without ``count`` and ``first_ts`` (:data:`STATE_EDGES` merges them);
    * the sequence parts (``sequences.parquet``, then ``sequences-1.parquet`` …): ``src, event_type, dst,
      ts`` — each user's last item per sequence type, a delta part holding the window's users only
      (:data:`STATE_SEQUENCES` takes the newest);
    * ``days.parquet``: ``day, events, checksum`` — per UTC day before the cut-off (days since 1970);
    * ``state.json``: the cut-off, the reference time, the edge and sequence parts, the edge types by id with their
      half-lives, the sequence event types and the day checksum.

    Leaves the temp table ``snap_edge_types``. The folder is meant to lie inside a partition written
    atomically (``ArtifactStore.write_partition``).

    Args:
        con: a connection to the warehouse (or any database with ``events`` and ``relations`` tables:
            an increment reads its window's events on a second connection of the same database, which
            sees neither temp tables nor registered views).
        cutoff: the cut-off ``T``.
        settings: half-lives, sequence event types, ``snapshot_incremental``, ``snapshot_scan_days``.
        folder: where the state goes.
        states: candidate state folders (``<snapshot>/state``), newest first.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for old in [*folder.glob("edges*.parquet"), *folder.glob("sequences*.parquet")]:  # a state written here
        old.unlink()  # before: its parts may be links into another state, which writing over them would change
    try:
        prepare_event_days(con, settings)
        types = prepare_edge_types(con, settings)
        base, provenance = (choose_base(con, cutoff, settings, states, types) if settings.snapshot_incremental
                            else (None, Provenance("full")))
        append = base is not None and _appendable(base, cutoff, types)
        reference = base.reference if append else cutoff
        step = len(base.sequence_parts) if append else 0  # an increment adds one sequence part
        parts = [*base.edge_parts, f"edges-{step}.parquet", f"edges-{step}-transitions.parquet"] if append else [BASE_PART]
        sequence_parts = [*base.sequence_parts, f"sequences-{step}.parquet"] if append else [BASE_SEQUENCES]
        values = {
            "cutoff": cutoff,
            "reference": reference,
            "start": base.cutoff if base else FULL_REBUILD_START,
            "sequence_events": settings.sequence_event_types,
            **(_state_values(base) if base else {}),
            "sequence_parts": [str(base.folder / name) for name in base.sequence_parts] if base else [],
            **_days_before(cutoff),
        }
        # the cursor is made here, not in the worker, and closed only after the worker is done
        with (con.cursor() if append else nullcontext()) as cursor, ThreadPoolExecutor(max_workers=1) as background:
            events = background.submit(_copy_on_cursor, cursor, EVENT_PART, {**values, **_edge_type_values(types)},
                                       folder / parts[-2]) if append else None
            sequences = SEQUENCES.format(previous=PREVIOUS.format(users=WINDOW_USERS if append else "") if base else "")
            con.execute(f"CREATE OR REPLACE TEMP TABLE snap_sequences AS {sequences}", _bind(sequences, values))
            if append:
                for name in [*base.edge_parts, *base.sequence_parts]:
                    _link(base.folder / name, folder / name)
            elif base:
                _load_state_types(con, base, {name: i for i, (name, _, _) in enumerate(types)})
            edges = TRANSITION_PART if append else ADVANCED_EDGES if base else STEP_EDGES
            edge_format = DELTA_PART_FORMAT if append else BASE_PART_FORMAT
            for query, name, form in ((edges, parts[-1], edge_format), (STEP_SEQUENCES, sequence_parts[-1], STATE_FORMAT),
                                      (DAYS_BEFORE, "days.parquet", STATE_FORMAT)):
                con.execute(f"COPY ({query}) TO $path {form}", {**_bind(query, values), "path": str(folder / name)})
            if events is not None:
                events.result()
    finally:
        drop_event_days(con)
        for table in ("snap_sequences", "snap_state_types"):
            con.execute(f"DROP TABLE IF EXISTS {table}")
    write_json(folder / "state.json", {
        "cutoff_iso": cutoff.isoformat(),
        "reference_iso": reference.isoformat(),
        "edge_parts": parts,
        "sequence_parts": sequence_parts,
        "edge_types": [name for name, _, _ in types],
        "half_life_days": {name: half_life for name, half_life, _ in types},
        "sequence_events": settings.sequence_event_types,
        "day_checksum": DAY_CHECKSUM,
    })
    return provenance


def _appendable(base: EdgeState, cutoff: datetime, types: list[tuple[str, float, float]]) -> bool:
    """Whether the step from ``base`` to ``cutoff`` can add parts rather than compact: ``base`` is made of
    fewer than :data:`COMPACT_STEPS` steps, its type ids are the current ones (``types``, every part shares
    them) and the decay from its reference time to ``cutoff`` stays within :data:`MAX_EXPONENT`."""
    span_us = (cutoff - base.reference).total_seconds() * 1e6
    return (len(base.sequence_parts) < COMPACT_STEPS and [name for name, _, _ in types] == base.edge_types
            and max((rate for _, _, rate in types), default=0.0) * span_us < MAX_EXPONENT)


def _copy_on_cursor(cursor: duckdb.DuckDBPyConnection, query: str, values: dict, path: Path) -> None:
    """``COPY (query) TO path`` in :data:`DELTA_PART_FORMAT` on ``cursor`` (a second connection to the
    warehouse, set to UTC here), so that it runs in another thread while the first works; ``values``
    may name more than ``query`` uses."""
    cursor.execute("SET TimeZone = 'UTC'")
    cursor.execute(f"COPY ({query}) TO $path {DELTA_PART_FORMAT}", {**_bind(query, values), "path": str(path)})


def _link(source: Path, target: Path) -> None:
    """``target`` as a hard link to ``source`` (a copy across file systems). Parts are never changed
    once written, and a link keeps its content when the base's partition is later replaced."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _load_state_types(con: duckdb.DuckDBPyConnection, state: EdgeState, ids: dict[str, int]) -> None:
    """The temp table ``snap_state_types`` of ``state``: its type ids, their ids in ``ids`` and decay rates."""
    names = state.edge_types
    con.register(STATE_TYPES, pa.table({
        "state_type_id": pa.array(range(len(names)), pa.int64()),
        "edge_type_id": pa.array([ids[name] for name in names], pa.int64()),
        "half_life_days": pa.array([state.half_life_days[name] for name in names], pa.float64()),
    }))
    try:
        con.execute(f"CREATE OR REPLACE TEMP TABLE snap_state_types AS {STATE_TYPE_RATES}")
    finally:
        con.unregister(STATE_TYPES)


def _state_values(state: EdgeState) -> dict:
    """The parameters of :data:`STATE_EDGES` but the cut-off."""
    return {"parts": [str(state.folder / name) for name in state.edge_parts], "state_reference": state.reference}


def load_state_edges(con: duckdb.DuckDBPyConnection, folder: str | Path) -> None:
    """``snap_state_edges``: the edges of the state in ``folder`` at its cut-off, in its type ids.

    A single base part is read as it is (a registered view of the file); parts are merged into a
    temp table (:data:`STATE_EDGES`), since the snapshot reads its edges several times. Where every
    part is empty the (empty) base part is read as it is too: DuckDB writes a column of a result it
    knows to hold no NULL as ``required``, and it knows that of an empty table but not of an empty
    file, so the snapshot's Parquet schema would otherwise differ from the full rebuild's.
    :func:`drop_state_edges` removes it.
    """
    state = read_state(folder)
    if state is None:
        raise FileNotFoundError(f"no complete edge state in {folder}")
    if state.edge_parts == [BASE_PART] or not any(
            pq.ParquetFile(state.folder / name).metadata.num_rows for name in state.edge_parts):
        con.register("snap_state_edges", con.read_parquet(str(state.folder / BASE_PART)))
        return
    _load_state_types(con, state, {name: i for i, name in enumerate(state.edge_types)})
    con.execute(f"CREATE OR REPLACE TEMP TABLE snap_state_edges AS {STATE_EDGES}", {**_state_values(state), "cutoff": state.cutoff})


def drop_state_edges(con: duckdb.DuckDBPyConnection) -> None:
    """Remove what :func:`load_state_edges` made."""
    con.unregister("snap_state_edges")  # a no-op where it is a table
    for table in ("snap_state_edges", "snap_state_types"):
        con.execute(f"DROP TABLE IF EXISTS {table}")


def build_snapshot(con: duckdb.DuckDBPyConnection, cutoff: datetime, settings: Settings, out_dir: str | Path,
                   states: Sequence[str | Path] = ()) -> SnapshotSummary:
    """Write ``nodes.parquet``, ``edges.parquet``, ``meta.json`` and the edge state ``state/`` for ``cutoff``.

    The edges are the edge state (:func:`build_edge_state`) merged with the relations valid before ``T``.

    Args:
        con: a connection to the warehouse (read-only is enough; temp tables are used).
        cutoff: the timezone-aware cut-off ``T``; nothing at or after it is used.
        settings: half-lives (``half_life_days``, ``default_half_life_days``), the event types that
            form sequences (``sequence_events``), ``snapshot_incremental``, threads, memory cap.
        out_dir: an existing folder, normally the scratch folder of ``ArtifactStore.write_partition``.
        states: the edge states of earlier snapshots (``<folder>/state``), newest first; the newest
            usable one is advanced instead of reading the whole log (see :func:`build_edge_state`).
    """
    out_dir = Path(out_dir)
    configure(con, settings)
    try:
        provenance = build_edge_state(con, cutoff, settings, out_dir / STATE_DIR, states)
        load_state_edges(con, out_dir / STATE_DIR)
        con.execute(f"CREATE OR REPLACE TEMP TABLE snap_relation_edges AS {RELATION_EDGES}", {"cutoff": cutoff})
        con.execute(f"CREATE OR REPLACE TEMP VIEW snap_edges AS {SNAPSHOT_EDGES}")
        con.execute(f"CREATE OR REPLACE TEMP TABLE snap_node_types AS {NODE_TYPES}")
        node_params = {"cutoff": cutoff, "activity_start": cutoff - timedelta(days=ACTIVITY_DAYS)}
        con.execute(f"CREATE OR REPLACE TEMP TABLE snap_nodes AS {NODES}", node_params)
        copy_to_parquet(con, NODES_FILE, out_dir / SNAPSHOT_NODES_FILE)
        copy_to_parquet(con, EDGES_FILE, out_dir / SNAPSHOT_EDGES_FILE)
        summary = _summarise(con, cutoff, provenance)
        meta = _meta(con, summary)
    finally:
        con.execute("DROP VIEW IF EXISTS snap_edges")
        drop_state_edges(con)
        for table in ("snap_relation_edges", "snap_node_types", "snap_edge_types", "snap_nodes"):
            con.execute(f"DROP TABLE IF EXISTS {table}")
    write_json(out_dir / META_FILE, meta)
    return summary


def _summarise(con: duckdb.DuckDBPyConnection, cutoff: datetime, provenance: Provenance) -> SnapshotSummary:
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
        provenance=provenance,
    )


def _meta(con: duckdb.DuckDBPyConnection, summary: SnapshotSummary) -> dict:
    node_types = [r[0] for r in con.execute("SELECT entity_type FROM snap_node_types ORDER BY type_id").fetchall()]
    edge_types = con.execute("SELECT edge_type, half_life_days FROM snap_edge_types ORDER BY edge_type_id").fetchall()
    provenance = summary.provenance
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
        "build": provenance.mode,
        "base_cutoff": provenance.base_cutoff.timestamp() if provenance.base_cutoff else None,
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
    copy_to_parquet(con, WINDOWS, out_dir / WINDOWS_FILE, bounds)
    stats = _stats(con, WINDOW_FILE_STATS, {**bounds, "path": str(out_dir / WINDOWS_FILE)})
    meta = {
        **{f"{k}_iso": v.isoformat() for k, v in bounds.items()},
        **{k: v.timestamp() for k, v in bounds.items()},
        "validation_rows": stats["validation"],
        "test_rows": stats["test"],
    }
    write_json(out_dir / META_FILE, meta)
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
    num_nodes = con.execute("SELECT count(*) FROM read_parquet(?)", [str(folder / SNAPSHOT_NODES_FILE)]).fetchone()[0]
    stats = _stats(con, SNAPSHOT_FILE_STATS, {"path": str(folder / SNAPSHOT_EDGES_FILE), "num_nodes": num_nodes})
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
    stats = _stats(con, WINDOW_FILE_STATS, {**bounds, "path": str(Path(folder) / WINDOWS_FILE)})
    passed = (
        (stats["min_ts"] is None or stats["min_ts"] >= cutoff)
        and stats["bad_validation"] == 0 and stats["bad_test"] == 0 and stats["bad_split"] == 0
    )
    metadata = {k: (v.isoformat() if isinstance(v, datetime) else int(v)) for k, v in stats.items() if v is not None}
    return passed, metadata
