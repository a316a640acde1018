"""Tiny hand-filled warehouses for the graph snapshot tests (platform, assets, models)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import duckdb
import pandas as pd
from hir.graph.warehouse import append_events, connect

UTC = timezone.utc
DAY0 = datetime(2026, 1, 1, tzinfo=UTC)

# (src, dst, event_type, ts, value): users 1-2, products 10-12 (12 appears only after Jan 5), category 20.
EVENTS = [
    (1, 10, "click", DAY0 + timedelta(days=1), 1.0),
    (1, 10, "click", DAY0 + timedelta(days=3), 1.0),
    (2, 10, "view", DAY0 + timedelta(days=3, hours=12), 1.0),
    (2, 11, "purchase", DAY0 + timedelta(days=3, hours=23, minutes=59, seconds=59), 9.5),
    (1, 12, "click", DAY0 + timedelta(days=4), 1.0),
    (2, 12, "view", DAY0 + timedelta(days=4, hours=12), 1.0),
    (1, 12, "click", DAY0 + timedelta(days=5, hours=12), 1.0),
    (1, 11, "view", DAY0 + timedelta(days=7), 1.0),
]
RELATIONS = [
    (10, 20, "in_category", DAY0),
    (11, 20, "in_category", DAY0 + timedelta(days=2)),
    (12, 20, "in_category", DAY0 + timedelta(days=4)),
]
TYPES = {1: "user", 2: "user", 10: "product", 11: "product", 12: "product", 20: "category"}


def fill(con: duckdb.DuckDBPyConnection, events, relations=(), types: dict[int, str] | None = None) -> None:
    """Insert ``events`` and ``relations`` and one entity per id seen, first seen at its first row.

    ``types`` maps entity id to type (default: ``user`` for ids below 10, else ``product``).
    """
    first: dict[int, datetime] = {}
    for src, dst, _, ts, *_ in list(events) + list(relations):
        for entity in (src, dst):
            first[entity] = min(first.get(entity, ts), ts)
    types = types or {}
    entities = pd.DataFrame(
        {
            "entity_id": list(first),
            "entity_type": [types.get(e, "user" if e < 10 else "product") for e in first],
            "source_key": [str(e) for e in first],
            "first_seen": pd.to_datetime(list(first.values()), utc=True),
        }
    )
    con.register("t_entities", entities)
    con.execute("INSERT INTO entities SELECT entity_id, entity_type, source_key, first_seen, NULL FROM t_entities")
    con.unregister("t_entities")
    add_events(con, events)
    if relations:
        con.executemany("INSERT INTO relations VALUES (?, ?, ?, ?)", [list(r) for r in relations])


def add_events(con: duckdb.DuckDBPyConnection, events) -> None:
    """Append ``(src, dst, event_type, ts, value)`` rows to ``events`` as the loader does, day
    fingerprints and all (:func:`hir.graph.warehouse.append_events`; their entities must exist)."""
    if events:
        frame = pd.DataFrame([list(e) for e in events], columns=["src", "dst", "event_type", "ts", "value"])
        frame["ts"] = pd.to_datetime(frame["ts"], utc=True)
        con.register("t_events", frame)
        try:
            append_events(con, "t_events")
        finally:
            con.unregister("t_events")


def tiny_warehouse(path) -> None:
    """The warehouse of :data:`EVENTS`, :data:`RELATIONS` and :data:`TYPES` at ``path``."""
    with connect(path) as con:
        fill(con, EVENTS, RELATIONS, TYPES)
