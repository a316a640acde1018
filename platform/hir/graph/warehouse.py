"""The DuckDB warehouse: canonical tables (DESIGN §3) and the idempotent loader of source batches.

Every value reaches SQL as a parameter or a registered frame, never spliced into the text.
"""

from __future__ import annotations

import contextlib
import errno
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import duckdb
import pandas as pd

from hir.errors import SourceError, StorageError
from hir.graph.sources.base import SourceBatch

SCHEMA = """
CREATE TABLE IF NOT EXISTS entities (
    entity_id BIGINT PRIMARY KEY,
    entity_type VARCHAR NOT NULL,
    source_key VARCHAR NOT NULL,
    first_seen TIMESTAMPTZ,
    attrs JSON,
    UNIQUE (entity_type, source_key)
);
CREATE TABLE IF NOT EXISTS events (
    src BIGINT NOT NULL, dst BIGINT NOT NULL, event_type VARCHAR NOT NULL,
    ts TIMESTAMPTZ NOT NULL, value DOUBLE
);
CREATE TABLE IF NOT EXISTS event_days (
    day BIGINT NOT NULL, event_type VARCHAR NOT NULL, events BIGINT NOT NULL, checksum UBIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS relations (
    src BIGINT NOT NULL, dst BIGINT NOT NULL, relation VARCHAR NOT NULL, valid_from TIMESTAMPTZ
);
CREATE TABLE IF NOT EXISTS content (
    entity_id BIGINT PRIMARY KEY, text VARCHAR, image_uri VARCHAR, content_hash VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS rejected_rows (
    source VARCHAR, location VARCHAR, raw VARCHAR, reason VARCHAR, ingested_at TIMESTAMPTZ
);
CREATE TABLE IF NOT EXISTS ingest_ledger (
    source VARCHAR NOT NULL, location VARCHAR, fingerprint VARCHAR NOT NULL,
    rows_read BIGINT, rows_accepted BIGINT, rows_rejected BIGINT, ingested_at TIMESTAMPTZ,
    PRIMARY KEY (source, fingerprint)
);
"""

CANONICAL_TABLES = ("entities", "events", "relations", "content", "rejected_rows")

# The day fingerprints of the events (``event_days``): per UTC day (days since 1970) and event type,
# the number of events and the XOR of their hashes. The loader keeps them in the transaction that
# appends the events, so that a snapshot learns which days changed since an earlier one (late events)
# from a table of days, not from a scan of the whole log (see hir.graph.snapshot). The count alone
# catches every late event (ingest only appends); the checksum also catches an event replaced by
# another at a different time or between other entities. It leaves the event type out of the hash:
# decoding that text column makes a scan of the log about three times as expensive.
DAY = "CAST(floor(epoch_us(ts) / 86400000000.0) AS BIGINT)"
DAY_CHECKSUM = "bit_xor(hash(src, dst, ts))"
EVENT_DAYS_OF = f"""
SELECT {DAY} AS day, event_type, count(*) AS events, {DAY_CHECKSUM} AS checksum
FROM {{table}}
GROUP BY ALL
"""

# event_days with the fingerprints of the rows of {table} added: counts add, checksums XOR.
MERGED_EVENT_DAYS = f"""
SELECT day, event_type, CAST(sum(events) AS BIGINT) AS events, bit_xor(checksum) AS checksum
FROM (SELECT day, event_type, events, checksum FROM event_days
      UNION ALL
      {EVENT_DAYS_OF})
GROUP BY day, event_type
"""


@contextlib.contextmanager
def connect(path: str | Path, read_only: bool = False, threads: int | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open the warehouse (creating the schema when writable), in UTC."""
    path = Path(path)
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        con = duckdb.connect(str(path), read_only=read_only)
    except duckdb.IOException as exc:
        raise _storage_error(path, exc) from None
    try:
        con.execute("SET TimeZone = 'UTC'")
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        if not read_only:
            con.execute(SCHEMA)
        yield con
    except duckdb.IOException as exc:  # disk full, read-only file system, …: the transaction rolled back
        raise _storage_error(path, exc) from None
    finally:
        con.close()


def _storage_error(path: Path, exc: Exception) -> StorageError:
    """DuckDB's I/O failure as the platform's one-line :class:`~hir.storage.StorageError`."""
    return StorageError(errno.EIO, f"warehouse {path}: {' '.join(str(exc).split())[:300]}")


@dataclass(frozen=True)
class LoadReport:
    """What one batch did to the warehouse."""

    source: str
    location: str
    skipped: bool
    rows_read: int
    rows_accepted: int
    rows_rejected: int
    new_entities: int = 0
    new_events: int = 0
    new_relations: int = 0
    content_rows: int = 0


def table_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in CANONICAL_TABLES}


def _count(con: duckdb.DuckDBPyConnection, table: str) -> int:
    return con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]


# Whether the day fingerprints count every event, in one statement (a snapshot step asks it each time).
EVENT_DAYS_COMPLETE = "SELECT (SELECT coalesce(sum(events), 0) FROM event_days) = (SELECT count(*) FROM events)"


def event_days_complete(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether ``event_days`` exists and accounts for every event (rows written into ``events``
    outside :func:`append_events`, or a warehouse from before the table, leave it short)."""
    try:
        return con.execute(EVENT_DAYS_COMPLETE).fetchall()[0][0]
    except duckdb.CatalogException:  # a database without the table (a bare log, a read-only old warehouse)
        return False


def append_events(con: duckdb.DuckDBPyConnection, table: str) -> int:
    """Append the rows of ``table`` (``src, dst, event_type, ts, value``; a table or view of this
    connection) to ``events`` and their day fingerprints to ``event_days``; returns the rows added.

    Where ``event_days`` did not account for the events before (see :func:`event_days_complete`), it
    is rebuilt from the whole log. Run it inside the transaction that writes the events.
    """
    if not table.isidentifier():
        raise ValueError(f"bad table name {table!r}")
    complete = event_days_complete(con)
    con.execute(f"INSERT INTO events SELECT src, dst, event_type, ts, value FROM {table}")
    added = _count(con, table)
    source = table if complete else "events"
    con.execute(f"CREATE OR REPLACE TEMP TABLE merged_event_days AS {MERGED_EVENT_DAYS.format(table=source)}")
    con.execute("DELETE FROM event_days")
    if complete:
        con.execute("INSERT INTO event_days SELECT * FROM merged_event_days")
    else:  # rebuilt from the log, which now holds the new rows too
        con.execute(f"INSERT INTO event_days {EVENT_DAYS_OF.format(table='events')}")
    con.execute("DROP TABLE merged_event_days")
    return added


_ALL_KEYS = """
CREATE TEMP TABLE batch_keys AS
SELECT entity_type, source_key, min(first_seen) AS first_seen, any_value(attrs) AS attrs
FROM (
    SELECT entity_type, source_key, CAST(first_seen AS TIMESTAMPTZ) AS first_seen, CAST(attrs AS JSON) AS attrs FROM b_entities
    UNION ALL SELECT src_type, src_key, CAST(ts AS TIMESTAMPTZ), NULL FROM b_events
    UNION ALL SELECT dst_type, dst_key, CAST(ts AS TIMESTAMPTZ), NULL FROM b_events
    UNION ALL SELECT src_type, src_key, CAST(valid_from AS TIMESTAMPTZ), NULL FROM b_relations
    UNION ALL SELECT dst_type, dst_key, CAST(valid_from AS TIMESTAMPTZ), NULL FROM b_relations
    UNION ALL SELECT entity_type, source_key, NULL, NULL FROM b_content
)
GROUP BY entity_type, source_key
"""

_NEW_ENTITIES = """
INSERT INTO entities
SELECT (SELECT coalesce(max(entity_id), -1) FROM entities)
           + row_number() OVER (ORDER BY k.entity_type, k.source_key),
       k.entity_type, k.source_key, k.first_seen, k.attrs
FROM batch_keys k ANTI JOIN entities e USING (entity_type, source_key)
"""

_NEW_EVENTS = """
CREATE TEMP TABLE batch_events AS
SELECT s.entity_id AS src, d.entity_id AS dst, b.event_type AS event_type, CAST(b.ts AS TIMESTAMPTZ) AS ts,
       CAST(b.value AS DOUBLE) AS value
FROM b_events b
JOIN entities s ON s.entity_type = b.src_type AND s.source_key = b.src_key
JOIN entities d ON d.entity_type = b.dst_type AND d.source_key = b.dst_key
"""

_NEW_EVENTS_DEDUP = _NEW_EVENTS.replace("AS\nSELECT s.entity_id", "AS\nSELECT * FROM (\nSELECT s.entity_id") + (
    ") n ANTI JOIN events e ON e.src = n.src AND e.dst = n.dst AND e.event_type = n.event_type AND e.ts = n.ts"
)

_NEW_RELATIONS = """
INSERT INTO relations
SELECT * FROM (
    SELECT DISTINCT s.entity_id AS src, d.entity_id AS dst, b.relation, CAST(b.valid_from AS TIMESTAMPTZ) AS valid_from
    FROM b_relations b
    JOIN entities s ON s.entity_type = b.src_type AND s.source_key = b.src_key
    JOIN entities d ON d.entity_type = b.dst_type AND d.source_key = b.dst_key
) n ANTI JOIN relations r ON r.src = n.src AND r.dst = n.dst AND r.relation = n.relation
"""

_UPSERT_CONTENT = """
INSERT OR REPLACE INTO content
SELECT e.entity_id, b.text, b.image_uri,
       sha256(coalesce(b.text, '') || chr(0) || coalesce(b.image_uri, ''))
FROM (SELECT entity_type, source_key, any_value(text) AS text, any_value(image_uri) AS image_uri
      FROM b_content GROUP BY entity_type, source_key) b
JOIN entities e USING (entity_type, source_key)
"""


def load_batch(con: duckdb.DuckDBPyConnection, batch: SourceBatch) -> LoadReport:
    """Load ``batch`` in one transaction; a batch whose fingerprint is in the ledger changes nothing."""
    done = con.execute(
        "SELECT count(*) FROM ingest_ledger WHERE source = ? AND fingerprint = ?",
        [batch.source, batch.fingerprint],
    ).fetchone()[0]
    if done:
        return LoadReport(batch.source, batch.location, True, batch.rows_read, batch.rows_accepted, batch.rows_rejected)
    if batch.whole_world:
        other = con.execute(
            "SELECT location FROM ingest_ledger WHERE source = ? AND fingerprint <> ? LIMIT 1",
            [batch.source, batch.fingerprint],
        ).fetchone()
        if other:
            raise SourceError(
                f"{batch.location}: this data home holds another generated world ({other[0]}) and the two "
                "would mix (their keys collide); keep the settings that made it, or set HIR_DATA_HOME to a new folder"
            )

    frames = {
        "b_entities": batch.entities,
        "b_events": batch.events,
        "b_relations": batch.relations,
        "b_content": batch.content,
        "b_rejected": batch.rejected,
    }
    con.execute("BEGIN TRANSACTION")
    try:
        for name, frame in frames.items():
            con.register(name, frame)
        before = {t: _count(con, t) for t in ("entities", "events", "relations")}
        had_events = before["events"] > 0
        con.execute(_ALL_KEYS)
        con.execute(_NEW_ENTITIES)
        con.execute(_NEW_EVENTS_DEDUP if had_events else _NEW_EVENTS)
        append_events(con, "batch_events")
        con.execute(_NEW_RELATIONS)
        content_rows = con.execute(_UPSERT_CONTENT).fetchone()[0] if len(batch.content) else 0
        con.execute(
            "INSERT INTO rejected_rows SELECT ?, location, raw, reason, now() FROM b_rejected",
            [batch.source],
        )
        for name, frame in batch.extra_tables.items():
            _load_extra_table(con, name, frame)
        con.execute(
            "INSERT INTO ingest_ledger VALUES (?, ?, ?, ?, ?, ?, now())",
            [batch.source, batch.location, batch.fingerprint, batch.rows_read, batch.rows_accepted, batch.rows_rejected],
        )
        after = {t: _count(con, t) for t in before}
        con.execute("DROP TABLE batch_keys")
        con.execute("DROP TABLE batch_events")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    finally:
        for name in frames:
            con.unregister(name)
    return LoadReport(
        batch.source,
        batch.location,
        False,
        batch.rows_read,
        batch.rows_accepted,
        batch.rows_rejected,
        new_entities=after["entities"] - before["entities"],
        new_events=after["events"] - before["events"],
        new_relations=after["relations"] - before["relations"],
        content_rows=int(content_rows),
    )


def _load_extra_table(con: duckdb.DuckDBPyConnection, name: str, frame: pd.DataFrame) -> None:
    """Insert ``frame`` (keyed by entity_type, source_key) into table ``name`` keyed by entity_id."""
    if not name.isidentifier():
        raise ValueError(f"bad table name {name!r}")
    con.register("b_extra", frame)
    try:
        rest = [c for c in frame.columns if c not in ("entity_type", "source_key")]
        cols = ", ".join(f'b."{c}"' for c in rest)
        select = f"SELECT e.entity_id, {cols} FROM b_extra b JOIN entities e USING (entity_type, source_key)"
        con.execute(f"CREATE TABLE IF NOT EXISTS {name} AS {select} LIMIT 0")
        con.execute(f"INSERT INTO {name} SELECT * FROM ({select}) n ANTI JOIN {name} t USING (entity_id)")
    finally:
        con.unregister("b_extra")
