"""The warehouse's day fingerprints (``event_days``), kept by the loader beside the events."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from hir.errors import SourceError
from hir.graph.sources.synthetic import generate
from hir.graph.warehouse import EVENT_DAYS_OF, connect, event_days_complete, load_batch
from hir.settings import Settings
from snapshot_data import DAY0, EVENTS, RELATIONS, TYPES, add_events, fill


def _fingerprints(con, table: str) -> list[tuple]:
    return con.execute(f"SELECT * FROM ({EVENT_DAYS_OF.format(table=table)}) ORDER BY ALL").fetchall()


def _kept(con) -> list[tuple]:
    return con.execute("SELECT * FROM event_days ORDER BY ALL").fetchall()


def test_loaded_batches_keep_the_fingerprints_of_a_scan_of_the_log(tmp_path):
    settings = Settings.from_mapping({}, data_home=tmp_path, synthetic_days=4, threads=1)
    with connect(tmp_path / "w.duckdb") as con:
        load_batch(con, generate(settings, events=3000))
        first = _kept(con)
        appended = dataclasses.replace(generate(settings.replace(seed=settings.seed + 1), events=2000), whole_world=False)
        load_batch(con, appended)  # as a later file of a log would be
        assert event_days_complete(con)
        assert _kept(con) == _fingerprints(con, "events") != first
        assert {row[1] for row in _kept(con)} == {r[0] for r in con.execute("SELECT DISTINCT event_type FROM events").fetchall()}


def test_a_second_generated_world_is_refused_and_the_first_kept(tmp_path):
    settings = Settings.from_mapping({}, data_home=tmp_path, synthetic_days=4, threads=1)
    with connect(tmp_path / "w.duckdb") as con:
        load_batch(con, generate(settings, events=3000))
        before = _kept(con)
        with pytest.raises(SourceError, match=r"synthetic seed=1 events=2000: this data home holds another generated world \(synthetic seed=0 events=3000\)"):
            load_batch(con, generate(settings.replace(seed=1), events=2000))
        assert _kept(con) == before
        assert load_batch(con, generate(settings, events=3000)).skipped  # the same world again: nothing to do


def test_events_written_past_the_loader_leave_the_fingerprints_short_until_the_next_append(tmp_path):
    with connect(tmp_path / "w.duckdb") as con:
        fill(con, EVENTS, RELATIONS, TYPES)
        assert event_days_complete(con) and _kept(con) == _fingerprints(con, "events")
        con.execute("INSERT INTO events VALUES (1, 11, 'click', ?, 1.0)", [DAY0 + timedelta(days=2)]).fetchall()
        assert not event_days_complete(con)
        add_events(con, [(2, 12, "click", DAY0 + timedelta(days=9), 1.0)])  # rebuilt from the whole log
        assert event_days_complete(con) and _kept(con) == _fingerprints(con, "events")


def test_an_empty_table_of_days_with_events_is_incomplete(tmp_path):
    """A warehouse from before ``event_days``: its events have no fingerprints yet."""
    with connect(tmp_path / "w.duckdb") as con:
        fill(con, EVENTS, RELATIONS, TYPES)
        con.execute("DELETE FROM event_days")
        assert not event_days_complete(con)
