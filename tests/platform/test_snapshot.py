"""The snapshot SQL: temporal cut-off, decayed weights, node table, windows and the checks' teeth."""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import shared_data
from hir.graph.snapshot import (
    COMPACT_STEPS,
    FOLLOWED_BY,
    STATE_DIR,
    Provenance,
    build_snapshot,
    build_windows,
    verify_snapshot,
    verify_windows,
)
from hir.graph.warehouse import connect, event_days_complete
from hir.models.graph import load_snapshot
from hir.settings import Settings
from hir.storage import read_json, write_json
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from snapshot_data import DAY0, add_events, fill, tiny_warehouse

UTC = timezone.utc
# "unlisted" uses the default half-life; events typed "followed_by" share the transitions' edge type.
TYPES = ["click", "view", "purchase", "unlisted", "followed_by"]


def _edges_by_entity(folder) -> dict[tuple[int, int, str], dict]:
    nodes = pq.read_table(folder / "nodes.parquet").column("entity_id").to_pylist()
    out = {}
    for e in pq.read_table(folder / "edges.parquet").to_pylist():
        out[(nodes[e["src"]], nodes[e["dst"]], e["edge_type"])] = e
    return out


def _transitions(events, cutoff: datetime, settings: Settings) -> list[tuple[int, int, str, datetime]]:
    """``(previous item, item, followed_by, ts)`` for consecutive sequence events of a user before T."""
    sequences = defaultdict(list)
    for src, dst, kind, ts, _ in events:
        if ts < cutoff and kind in settings.sequence_event_types:
            sequences[(src, kind)].append((ts, dst))
    out = []
    for sequence in sequences.values():
        ordered = sorted(sequence)
        out += [(a, b, "followed_by", ts) for (_, a), (ts, b) in zip(ordered, ordered[1:]) if a != b]
    return out


def _expected(events, cutoff: datetime, settings: Settings) -> dict[tuple[int, int, str], dict]:
    """Direct Python aggregation: count, last time and Σ 2^(-(T - ts)/half-life) of events and
    transitions before T."""
    acc = defaultdict(lambda: {"count": 0, "last_ts": -math.inf, "weight": 0.0})
    rows = [(src, dst, kind, ts) for src, dst, kind, ts, _ in events] + _transitions(events, cutoff, settings)
    for src, dst, kind, ts in rows:
        if ts >= cutoff:
            continue
        edge = acc[(src, dst, kind)]
        age_days = (cutoff - ts).total_seconds() / 86400
        edge["count"] += 1
        edge["last_ts"] = max(edge["last_ts"], ts.timestamp())
        edge["weight"] += 2.0 ** (-age_days / settings.half_life(kind))
    return dict(acc)


event_logs = st.lists(
    st.tuples(
        st.integers(0, 5),  # user
        st.integers(10, 13),  # item (few, so sequences revisit items)
        st.sampled_from(TYPES),
        st.integers(0, 10 * 86400),  # seconds after DAY0
    ),
    max_size=40,
)


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    raw=event_logs,
    cut=st.one_of(st.integers(0, 10 * 86400), st.just(None)),
    half_lives=st.fixed_dictionaries({"click": st.floats(0.5, 30), "view": st.floats(0.5, 30), "followed_by": st.floats(0.5, 30)}),
    default_half_life=st.floats(0.5, 30),
    sequence_events=st.sampled_from(["purchase", "purchase,click", ""]),
)
def test_no_edge_at_or_after_cutoff_and_weights_match_python(tmp_path_factory, raw, cut, half_lives, default_half_life, sequence_events):
    # cut=None puts the cut-off exactly on an event's time (the boundary case), when there is one.
    seconds = cut if cut is not None or not raw else raw[len(raw) // 2][3]
    cutoff = DAY0 + timedelta(seconds=seconds or 0)
    events = [(u, i, k, DAY0 + timedelta(seconds=s), 1.0) for u, i, k, s in raw]
    settings = Settings.from_mapping({}, half_life_days=half_lives, default_half_life_days=default_half_life,
                                 sequence_events=sequence_events, threads=1)
    out = tmp_path_factory.mktemp("snap")
    with connect(":memory:") as con:
        fill(con, events)
        build_snapshot(con, cutoff, settings, out)
        checks = verify_snapshot(con, out, cutoff, settings)

    got = _edges_by_entity(out)
    want = _expected(events, cutoff, settings)
    assert set(got) == set(want)
    for key, edge in got.items():
        assert edge["last_ts"] < cutoff.timestamp()
        assert edge["count"] == want[key]["count"]
        assert edge["last_ts"] == want[key]["last_ts"]
        assert edge["weight"] == pytest.approx(want[key]["weight"], rel=1e-9)
    assert all(passed for passed, _ in checks.values()), checks


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "w.duckdb"
    tiny_warehouse(path)
    return path


def test_snapshot_of_tiny_warehouse(tiny, tmp_path):
    cutoff = DAY0 + timedelta(days=4)  # partition 2026-01-04
    settings = Settings.from_mapping({}, threads=1)
    with connect(tiny, read_only=True) as con:
        summary = build_snapshot(con, cutoff, settings, tmp_path)
    nodes = pq.read_table(tmp_path / "nodes.parquet").to_pylist()
    edges = _edges_by_entity(tmp_path)

    # Product 12 and its relation start exactly at T: not in the snapshot.
    assert [n["entity_id"] for n in nodes] == [1, 2, 10, 11, 20]
    assert [n["entity_type"] for n in nodes] == ["user", "user", "product", "product", "category"]
    assert [n["type_id"] for n in nodes] == [2, 2, 1, 1, 0]
    assert set(edges) == {(1, 10, "click"), (2, 10, "view"), (2, 11, "purchase"), (10, 20, "in_category"), (11, 20, "in_category")}
    click = edges[(1, 10, "click")]
    assert click["count"] == 2
    assert click["weight"] == pytest.approx(2 ** (-3 / 7) + 2 ** (-1 / 7))
    relation = edges[(10, 20, "in_category")]
    assert (relation["count"], relation["weight"], relation["last_ts"]) == (1, 1.0, DAY0.timestamp())
    # The purchase one second before T is in, with weight 2^(-1s / 21 days).
    assert edges[(2, 11, "purchase")]["weight"] == pytest.approx(2 ** (-1 / (21 * 86400)))

    by_id = {n["entity_id"]: n for n in nodes}
    assert by_id[10]["degree"] == 3 and by_id[20]["degree"] == 2 and by_id[1]["degree"] == 1
    assert by_id[1]["age_days"] == pytest.approx(3.0)
    assert by_id[20]["age_days"] == pytest.approx(4.0)
    assert by_id[2]["activity"] == 2 and by_id[20]["activity"] == 0
    assert summary.rows_used == 6 and summary.num_nodes == 5 and summary.num_edges == 5

    graph = load_snapshot(tmp_path)  # the torch view agrees with the node table
    assert graph.edge_types == ["click", "followed_by", "in_category", "purchase", "view"]
    assert graph.csr.degree().tolist() == [n["degree"] for n in nodes]
    assert graph.cutoff == cutoff.timestamp()


def test_sequences_become_followed_by_edges_before_the_cutoff_only(tmp_path):
    at = [DAY0 + timedelta(days=d) for d in range(5)]
    events = [(1, 10, "purchase", at[0], 1.0), (1, 11, "purchase", at[1], 1.0), (1, 11, "purchase", at[2], 1.0),
              (1, 10, "purchase", at[3], 1.0), (1, 12, "purchase", at[4], 1.0),  # the last one is at T
              (2, 10, "purchase", at[1], 1.0), (2, 11, "view", at[2], 1.0), (2, 11, "purchase", at[3], 1.0)]
    for sequence_events, want in (("purchase", {(10, 11), (11, 10)}), ("", set())):
        settings = Settings.from_mapping({}, threads=1, sequence_events=sequence_events)
        out = tmp_path / (sequence_events or "off")
        out.mkdir()
        with connect(":memory:") as con:
            fill(con, events)
            build_snapshot(con, at[4], settings, out)
            checks = verify_snapshot(con, out, at[4], settings)
        edges = {k: e for k, e in _edges_by_entity(out).items() if k[2] == "followed_by"}
        assert {(a, b) for a, b, _ in edges} == want
        if want:  # 10→11 by both users (the repeat 11, 11 is no transition); 11→10 once, at day 3
            assert edges[(10, 11, "followed_by")]["count"] == 2
            assert edges[(11, 10, "followed_by")]["last_ts"] == at[3].timestamp()
        assert ("followed_by" in load_snapshot(out).edge_types) == bool(want)
        assert all(passed for passed, _ in checks.values()), checks


def test_events_typed_followed_by_share_one_edge_with_the_transitions(tmp_path):
    """Events and transitions are aggregated apart; an event type named followed_by must not split an edge."""
    at = [DAY0 + timedelta(days=d) for d in range(4)]
    events = [(1, 10, "purchase", at[0], 1.0), (1, 11, "purchase", at[1], 1.0), (10, 11, "followed_by", at[2], 1.0)]
    settings = Settings.from_mapping({}, threads=1)
    with connect(":memory:") as con:
        fill(con, events)
        build_snapshot(con, at[3], settings, tmp_path)
        checks = verify_snapshot(con, tmp_path, at[3], settings)
    edges = pq.read_table(tmp_path / "edges.parquet").to_pylist()
    assert [(e["edge_type"], e["count"], e["last_ts"]) for e in edges if e["edge_type"] == "followed_by"] == [
        ("followed_by", 2, at[2].timestamp())]
    assert all(passed for passed, _ in checks.values()), checks


def test_windows_are_chronological_and_split(tiny, tmp_path):
    cutoff = DAY0 + timedelta(days=4)
    settings = Settings.from_mapping({}, val_days=1.0, test_days=1.0, threads=1)
    with connect(tiny, read_only=True) as con:
        meta = build_windows(con, cutoff, settings, tmp_path)
        passed, _ = verify_windows(con, tmp_path, cutoff, settings)
    rows = pq.read_table(tmp_path / "windows.parquet").to_pylist()
    assert [(r["src"], r["dst"], r["split"]) for r in rows] == [(1, 12, "validation"), (2, 12, "validation"), (1, 12, "test")]
    assert rows[0]["ts"] == cutoff
    assert (meta["validation_rows"], meta["test_rows"]) == (2, 1)
    assert meta["test_start"] == (cutoff + timedelta(days=1)).timestamp()
    assert passed


def _rewrite(path, column: str, index: int, value) -> None:
    table = pq.read_table(path)
    values = table.column(column).to_pylist()
    values[index] = value
    pq.write_table(table.set_column(table.schema.get_field_index(column), column, pa.array(values, table.schema.field(column).type)), path)


def test_checks_fail_on_a_future_edge_and_a_missing_endpoint(tiny, tmp_path):
    cutoff = DAY0 + timedelta(days=4)
    with connect(tiny, read_only=True) as con:
        settings = Settings.from_mapping({}, threads=1)
        build_snapshot(con, cutoff, settings, tmp_path)
        assert all(p for p, _ in verify_snapshot(con, tmp_path, cutoff, settings).values())
        _rewrite(tmp_path / "edges.parquet", "last_ts", 0, cutoff.timestamp())
        _rewrite(tmp_path / "edges.parquet", "dst", 1, 99)
        checks = verify_snapshot(con, tmp_path, cutoff, settings)
    assert not checks["no_future_events"][0]
    assert not checks["edge_endpoints_exist"][0]
    assert checks["edge_endpoints_exist"][1]["bad_endpoints"] == 1


def test_windows_check_fails_on_overlap_with_training(tiny, tmp_path):
    cutoff = DAY0 + timedelta(days=4)
    settings = Settings.from_mapping({}, threads=1)
    with connect(tiny, read_only=True) as con:
        build_windows(con, cutoff, settings, tmp_path)
        _rewrite(tmp_path / "windows.parquet", "ts", 0, cutoff - timedelta(seconds=1))
        assert not verify_windows(con, tmp_path, cutoff, settings)[0]
        build_windows(con, cutoff, settings, tmp_path)
        _rewrite(tmp_path / "windows.parquet", "split", 2, "validation")  # a test-window row marked validation
        assert not verify_windows(con, tmp_path, cutoff, settings)[0]


def test_taobao_snapshot_has_nothing_on_or_after_the_cutoff_day(tmp_path):
    """The real UserBehavior head, through its adapter and the warehouse loader."""
    from hir.graph.sources import read_source
    from hir.graph.warehouse import load_batch

    csv = shared_data("taobao_userbehavior") / "UserBehavior_head.csv"
    cutoff = datetime(2017, 12, 2, tzinfo=UTC)
    settings = Settings.from_mapping({}, threads=2)
    with connect(tmp_path / "w.duckdb") as con:
        load_batch(con, read_source("taobao_userbehavior", csv, settings))
        later = con.execute("SELECT count(*) FROM events WHERE ts >= ?", [cutoff]).fetchone()[0]
        summary = build_snapshot(con, cutoff, settings, tmp_path)
        checks = verify_snapshot(con, tmp_path, cutoff, settings)
    assert later > 0  # the file does hold events on and after the cut-off day
    edges = pq.read_table(tmp_path / "edges.parquet")
    assert max(edges.column("last_ts").to_pylist()) < cutoff.timestamp()
    assert set(edges.column("edge_type").to_pylist()) == {"pv", "cart", "fav", "buy", "in_category", "followed_by"}
    assert summary.num_edges == edges.num_rows > 0
    assert all(passed for passed, _ in checks.values()), checks


def _snapshot_files(folder) -> dict[str, pa.Table]:
    return {name: pq.read_table(folder / name) for name in ("nodes.parquet", "edges.parquet")}


def _assert_same_snapshot(got, want) -> None:
    """Nodes and edges equal; edge weights (and nothing else) only up to float rounding."""
    got, want = _snapshot_files(got), _snapshot_files(want)
    assert got["nodes.parquet"].equals(want["nodes.parquet"])
    g, w = got["edges.parquet"], want["edges.parquet"]
    assert g.drop(["weight"]).equals(w.drop(["weight"]))
    assert g.column("weight").to_pylist() == pytest.approx(w.column("weight").to_pylist(), rel=1e-9)


@hsettings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    raw=event_logs,
    late=event_logs,
    cuts=st.tuples(st.integers(0, 10 * 86400), st.integers(1, 10 * 86400)),
    sequence_events=st.sampled_from(["purchase", "purchase,click", ""]),
)
def test_advancing_a_state_equals_the_full_rebuild(tmp_path_factory, raw, late, cuts, sequence_events):
    """State at T0, then more events (some before T0: late), then the snapshot at T > T0."""
    base_cut = DAY0 + timedelta(seconds=cuts[0])
    cutoff = base_cut + timedelta(seconds=cuts[1])
    events = [(u, i, k, DAY0 + timedelta(seconds=s), 1.0) for u, i, k, s in raw]
    later = [(u, i, k, DAY0 + timedelta(seconds=s), 1.0) for u, i, k, s in late]
    settings = Settings.from_mapping({}, sequence_events=sequence_events, threads=1)
    base, incremental, full = (tmp_path_factory.mktemp(name) for name in ("base", "incremental", "full"))
    with connect(":memory:") as con:
        fill(con, events + later, types={})
        con.execute("DELETE FROM events")  # the entities stay; the later events arrive after the base
        add_events(con, events)
        build_snapshot(con, base_cut, settings, base)
        add_events(con, later)
        summary = build_snapshot(con, cutoff, settings, incremental, states=[base / "state"])
        build_snapshot(con, cutoff, Settings.from_mapping({}, sequence_events=sequence_events, threads=1,
                                                      snapshot_incremental=False), full)
        checks = verify_snapshot(con, incremental, cutoff, settings)

    _assert_same_snapshot(incremental, full)
    assert all(passed for passed, _ in checks.values()), checks
    late_before_base = [ts for *_, ts, _ in later if ts < base_cut]
    provenance = summary.provenance
    if late_before_base:  # the base state is stale: recomputed from scratch, from the first late day on
        assert provenance.mode == "full" and provenance.stale == (base / "state",)
        assert provenance.first_late_day == min(late_before_base).date()
        assert provenance.late_events == len(late_before_base)
    else:
        assert provenance.mode == "incremental" and provenance.base_cutoff == base_cut
        assert provenance.first_late_day is None


def _synthetic_warehouse(tmp_path, settings):
    from hir.graph.sources.synthetic import generate
    from hir.graph.warehouse import load_batch

    path = tmp_path / "w.duckdb"
    with connect(path) as con:
        load_batch(con, generate(settings, events=6000))
    return path


def test_daily_chain_of_incremental_snapshots_equals_full_and_a_late_event_recomputes_from_its_day(tmp_path):
    settings = Settings.from_mapping({}, data_home=tmp_path, synthetic_days=10, threads=1)
    full_settings = Settings.from_mapping({}, data_home=tmp_path, synthetic_days=10, threads=1, snapshot_incremental=False)
    warehouse = _synthetic_warehouse(tmp_path, settings)
    cutoffs = [datetime(2026, 1, 3 + d, tzinfo=UTC) for d in range(5)]  # partitions Jan 2 … Jan 6
    folders = []
    with connect(warehouse, read_only=True) as con:
        for cutoff in cutoffs:
            folder = tmp_path / f"inc-{cutoff.date()}"
            folder.mkdir()
            summary = build_snapshot(con, cutoff, settings, folder, states=[f / "state" for f in reversed(folders)])
            full = tmp_path / f"full-{cutoff.date()}"
            full.mkdir()
            build_snapshot(con, cutoff, full_settings, full)
            _assert_same_snapshot(folder, full)
            assert summary.provenance.mode == ("incremental" if folders else "full")
            assert summary.provenance.base_cutoff == (cutoffs[len(folders) - 1] if folders else None)
            assert all(passed for passed, _ in verify_snapshot(con, folder, cutoff, settings).values())
            folders.append(folder)
        transitions = pq.read_table(folders[-1] / "edges.parquet").column("edge_type").to_pylist().count("followed_by")
    assert transitions > 0  # the chain carried sequences across days

    # A purchase arrives late on Jan 3 (already in the Jan 3, 4 and 5 snapshots), through the loader,
    # which records it in the day fingerprints: the Jan 7 cut-off recomputes from the Jan 2 state
    # (cut-off Jan 3 00:00), and reports it.
    with connect(warehouse) as con:
        user, item = con.execute("SELECT src, dst FROM events WHERE event_type = 'purchase' LIMIT 1").fetchall()[0]
        add_events(con, [(user, item, "purchase", datetime(2026, 1, 3, 12, tzinfo=UTC), 1.0)])
        assert event_days_complete(con)
    with connect(warehouse, read_only=True) as con:
        late = tmp_path / "late"
        late.mkdir()
        summary = build_snapshot(con, cutoffs[-1], settings, late, states=[f / "state" for f in reversed(folders)])
        (tmp_path / "late-full").mkdir()
        build_snapshot(con, cutoffs[-1], full_settings, tmp_path / "late-full")
        assert all(passed for passed, _ in verify_snapshot(con, late, cutoffs[-1], settings).values())
    provenance = summary.provenance
    assert (provenance.mode, provenance.base_cutoff) == ("incremental", cutoffs[0])
    assert provenance.first_late_day == datetime(2026, 1, 3).date() and provenance.late_events == 1
    assert provenance.stale == tuple(f / "state" for f in reversed(folders[1:4]))  # cut-offs Jan 6, 5, 4
    assert "late event" in provenance.describe()
    _assert_same_snapshot(late, tmp_path / "late-full")


def _state_parts(folder) -> list[str]:
    return read_json(folder / STATE_DIR / "state.json")["edge_parts"]


def _build_pair(con, cutoff, settings, full_settings, folder, full, states):
    """The snapshot at ``cutoff`` from ``states`` into ``folder`` and the full rebuild into ``full``,
    checked equal and passing the checks; the incremental summary."""
    folder.mkdir()
    full.mkdir()
    summary = build_snapshot(con, cutoff, settings, folder, states=states)
    build_snapshot(con, cutoff, full_settings, full)
    _assert_same_snapshot(folder, full)
    assert all(passed for passed, _ in verify_snapshot(con, folder, cutoff, settings).values())
    return summary


def test_increments_add_parts_equal_to_the_full_rebuild_across_a_compaction(tmp_path):
    """More than COMPACT_STEPS days in a row: every day adds two parts, its events' and its transitions'
    (earlier parts hard links, not rewritten), until a state holds COMPACT_STEPS days; the next day
    compacts them into one base part. Every snapshot equals the full rebuild, and so does the state,
    parts merged."""
    from hir.cli.bench.snapshot import same_state

    settings = Settings.from_mapping({}, data_home=tmp_path, synthetic_days=14, threads=1)
    full_settings = Settings.from_mapping({}, data_home=tmp_path, synthetic_days=14, threads=1, snapshot_incremental=False)
    warehouse = _synthetic_warehouse(tmp_path, settings)
    days = COMPACT_STEPS + 3
    cutoffs = [datetime(2026, 1, 3 + d, tzinfo=UTC) for d in range(days)]
    folders, parts, transitions = [], [], 0
    with connect(warehouse, read_only=True) as con:
        for cutoff in cutoffs:
            folder, full = tmp_path / f"inc-{cutoff.date()}", tmp_path / f"full-{cutoff.date()}"
            summary = _build_pair(con, cutoff, settings, full_settings, folder, full,
                                  [f / STATE_DIR for f in reversed(folders)])
            assert summary.provenance.mode == ("incremental" if folders else "full")
            assert same_state(folder / STATE_DIR, full / STATE_DIR)
            parts.append(_state_parts(folder))
            if len(parts[-1]) > 1:  # the base's parts are links to the very files of the base
                previous = folders[-1] / STATE_DIR
                step = len(read_json(folder / STATE_DIR / "state.json")["sequence_parts"]) - 1
                assert parts[-1][-2:] == [f"edges-{step}.parquet", f"edges-{step}-transitions.parquet"]
                assert parts[-1][:-2] == _state_parts(folders[-1])
                assert all((folder / STATE_DIR / name).samefile(previous / name) for name in parts[-1][:-2])
                assert pq.ParquetFile(folder / STATE_DIR / parts[-1][-2]).metadata.num_rows < \
                    pq.ParquetFile(full / STATE_DIR / "edges.parquet").metadata.num_rows  # a day, not all of it
                followed_by = read_json(folder / STATE_DIR / "state.json")["edge_types"].index(FOLLOWED_BY)
                types = [set(pq.read_table(folder / STATE_DIR / name)["edge_type_id"].to_pylist()) for name in parts[-1][-2:]]
                assert followed_by not in types[0] and types[1] <= {followed_by}  # the day's transitions, apart
                transitions += pq.ParquetFile(folder / STATE_DIR / parts[-1][-1]).metadata.num_rows
            folders.append(folder)
    assert transitions > 0
    counts = [len(p) for p in parts]
    assert counts == [*(1 + 2 * day for day in range(COMPACT_STEPS)), 1, 3, 5][:days]
    compacted = folders[COMPACT_STEPS] / STATE_DIR
    assert read_json(compacted / "state.json")["reference_iso"] == cutoffs[COMPACT_STEPS].isoformat()
    assert not (compacted / "edges.parquet").samefile(folders[0] / STATE_DIR / "edges.parquet")
    # base parts (the full rebuild's, a compaction's) in Parquet v2's delta encodings, delta parts plain v1
    assert [_id_encodings(folders[0] / STATE_DIR / "edges.parquet"), _id_encodings(compacted / "edges.parquet"),
            _id_encodings(folders[1] / STATE_DIR / "edges-1.parquet")] == ["DELTA_BINARY_PACKED"] * 2 + ["PLAIN"]


def _id_encodings(part) -> str:
    """The data encoding of a part's ``src`` column (every row group's, which must agree)."""
    meta = pq.ParquetFile(part).metadata
    names = {name for g in range(meta.num_row_groups) for name in meta.row_group(g).column(0).encodings if name != "RLE"}
    assert len(names) == 1, names
    return names.pop()


def test_a_late_event_recomputes_from_its_day_on_a_state_with_parts(tmp_path):
    """A state with several parts, then a late purchase in a day covered by the newer states: the
    snapshot advances the newest state before that day (parts and all) and equals the full rebuild."""
    settings = Settings.from_mapping({}, data_home=tmp_path, synthetic_days=10, threads=1)
    full_settings = Settings.from_mapping({}, data_home=tmp_path, synthetic_days=10, threads=1, snapshot_incremental=False)
    warehouse = _synthetic_warehouse(tmp_path, settings)
    cutoffs = [datetime(2026, 1, 3 + d, tzinfo=UTC) for d in range(6)]  # Jan 3 … Jan 8
    folders = []
    with connect(warehouse, read_only=True) as con:
        for cutoff in cutoffs[:5]:
            folder = tmp_path / f"inc-{cutoff.date()}"
            folder.mkdir()
            build_snapshot(con, cutoff, settings, folder, states=[f / STATE_DIR for f in reversed(folders)])
            folders.append(folder)
    assert len(_state_parts(folders[3])) == 1 + 2 * 3  # the base the late event leaves: three increments on a full state
    with connect(warehouse) as con:  # written past the loader: the day fingerprints fall short, the log is scanned
        user, item = con.execute("SELECT src, dst FROM events WHERE event_type = 'purchase' LIMIT 1").fetchone()
        con.execute("INSERT INTO events VALUES (?, ?, 'purchase', ?, 1.0)", [user, item, datetime(2026, 1, 6, 9, tzinfo=UTC)])
        assert not event_days_complete(con)
    with connect(warehouse, read_only=True) as con:
        summary = _build_pair(con, cutoffs[5], settings, full_settings, tmp_path / "late", tmp_path / "late-full",
                              [f / STATE_DIR for f in reversed(folders)])
    provenance = summary.provenance
    assert (provenance.mode, provenance.base_cutoff) == ("incremental", cutoffs[3])  # the state at Jan 6 00:00
    assert provenance.first_late_day == datetime(2026, 1, 6).date() and provenance.late_events == 1
    assert provenance.stale == (folders[4] / STATE_DIR,)
    assert _state_parts(tmp_path / "late") == [*_state_parts(folders[3]), "edges-4.parquet", "edges-4-transitions.parquet"]


def test_a_new_event_type_compacts_the_parts_into_the_new_type_ids(tiny, tmp_path):
    """An event type first seen after a state was written shifts the type ids: the parts cannot take
    another part in the old ids, so the step compacts them (mapping the ids) and equals the full rebuild."""
    settings = Settings.from_mapping({}, threads=1)
    full_settings = Settings.from_mapping({}, threads=1, snapshot_incremental=False)
    folders = []
    with connect(tiny) as con:
        for day in (2, 3, 4):
            folder = tmp_path / f"d{day}"
            folder.mkdir()
            build_snapshot(con, DAY0 + timedelta(days=day), settings, folder, states=[f / STATE_DIR for f in reversed(folders)])
            folders.append(folder)
        assert len(_state_parts(folders[-1])) == 1 + 2 * 2  # two increments on a full state
        add_events(con, [(1, 10, "add_to_cart", DAY0 + timedelta(days=4, hours=3), 1.0)])  # sorts first: every id shifts
        summary = _build_pair(con, DAY0 + timedelta(days=5), settings, full_settings, tmp_path / "new", tmp_path / "new-full",
                              [f / STATE_DIR for f in reversed(folders)])
    assert summary.provenance.mode == "incremental"
    assert _state_parts(tmp_path / "new") == ["edges.parquet"]
    assert _edges_by_entity(tmp_path / "new")[(1, 10, "add_to_cart")]["count"] == 1


def test_a_decay_too_large_for_one_reference_time_compacts(tiny, tmp_path):
    """With a half-life so short that the weights as of the base's reference time would leave the range
    of exp(), the step compacts instead of adding a part, and still equals the full rebuild."""
    settings = Settings.from_mapping({}, threads=1, half_life_days={"click": 0.001})  # a day: 2^1000 = e^693
    full_settings = Settings.from_mapping({}, threads=1, half_life_days={"click": 0.001}, snapshot_incremental=False)
    with connect(tiny, read_only=True) as con:
        (tmp_path / "a").mkdir()
        build_snapshot(con, DAY0 + timedelta(days=3), settings, tmp_path / "a")
        _build_pair(con, DAY0 + timedelta(days=4), settings, full_settings, tmp_path / "b", tmp_path / "b-full",
                    [tmp_path / "a" / STATE_DIR])
    assert _state_parts(tmp_path / "b") == ["edges.parquet"]


def test_writing_a_state_again_in_its_folder_leaves_the_linked_base_alone(tiny, tmp_path):
    """An increment's first part is a link to its base's file: writing another state into the same folder
    (a rerun, a full rebuild) replaces the link, never the base's content."""
    settings = Settings.from_mapping({}, threads=1)
    base, inc = tmp_path / "a", tmp_path / "b"
    base.mkdir(), inc.mkdir()
    with connect(tiny, read_only=True) as con:
        build_snapshot(con, DAY0 + timedelta(days=3), settings, base)
        before = {name: pq.read_table(base / STATE_DIR / name) for name in ("edges.parquet", "sequences.parquet")}
        for _ in range(2):  # a rerun finds the links of the first run in place
            build_snapshot(con, DAY0 + timedelta(days=4), settings, inc, states=[base / STATE_DIR])
            assert _state_parts(inc) == ["edges.parquet", "edges-1.parquet", "edges-1-transitions.parquet"]
            assert read_json(inc / STATE_DIR / "state.json")["sequence_parts"] == ["sequences.parquet", "sequences-1.parquet"]
        build_snapshot(con, DAY0 + timedelta(days=4), Settings.from_mapping({}, threads=1, snapshot_incremental=False), inc)
        assert _state_parts(inc) == ["edges.parquet"]
        assert not any((inc / STATE_DIR / name).exists() for name in ("edges-1.parquet", "edges-1-transitions.parquet"))
        assert not (inc / STATE_DIR / "sequences-1.parquet").exists()
        for name in before:
            assert not (inc / STATE_DIR / name).samefile(base / STATE_DIR / name)
    assert all(pq.read_table(base / STATE_DIR / name).equals(table) for name, table in before.items())


def test_a_delta_part_holds_single_events_and_one_written_with_counts_still_advances(tiny, tmp_path):
    """An increment's part leaves out count (1) and first_ts (its last_ts); a state whose delta part has
    them, as written before, is read by column name and still advances equal to the full rebuild."""
    settings = Settings.from_mapping({}, threads=1)
    full_settings = Settings.from_mapping({}, threads=1, snapshot_incremental=False)
    base, inc = tmp_path / "a", tmp_path / "b"
    base.mkdir(), inc.mkdir()
    with connect(tiny, read_only=True) as con:
        build_snapshot(con, DAY0 + timedelta(days=3), settings, base)
        build_snapshot(con, DAY0 + timedelta(days=4), settings, inc, states=[base / STATE_DIR])
        delta = inc / STATE_DIR / "edges-1.parquet"
        rows = pq.read_table(delta)
        assert rows.column_names == ["src", "dst", "edge_type_id", "last_ts", "weight"] and rows.num_rows > 0
        ones = pa.array([1] * rows.num_rows, pa.int64())
        pq.write_table(pa.table({"src": rows["src"], "dst": rows["dst"], "edge_type_id": rows["edge_type_id"],
                                 "count": ones, "first_ts": rows["last_ts"], "last_ts": rows["last_ts"],
                                 "weight": rows["weight"]}), delta)
        summary = _build_pair(con, DAY0 + timedelta(days=5), settings, full_settings, tmp_path / "c", tmp_path / "c-full",
                              [inc / STATE_DIR])
    assert summary.provenance.mode == "incremental"
    assert _state_parts(tmp_path / "c") == ["edges.parquet", "edges-1.parquet", "edges-1-transitions.parquet",
                                            "edges-2.parquet", "edges-2-transitions.parquet"]


def test_a_state_with_one_delta_part_per_increment_still_advances(tiny, tmp_path):
    """A state written before an increment's transitions had a part of their own holds one delta part
    per increment, events and transitions together: it is read by the parts its state.json lists, and
    the next step adds its two parts after them and equals the full rebuild."""
    settings = Settings.from_mapping({}, threads=1)
    full_settings = Settings.from_mapping({}, threads=1, snapshot_incremental=False)
    base, inc = tmp_path / "a", tmp_path / "b"
    base.mkdir(), inc.mkdir()
    with connect(tiny) as con:
        add_events(con, [(2, 10, "purchase", DAY0 + timedelta(days=4, hours=h), 1.0) for h in (1, 3)]
                   + [(2, 12, "purchase", DAY0 + timedelta(days=4, hours=2), 1.0)])  # 11 → 10 → 12 → 10
        build_snapshot(con, DAY0 + timedelta(days=4), settings, base)
        build_snapshot(con, DAY0 + timedelta(days=5), settings, inc, states=[base / STATE_DIR])
        state = inc / STATE_DIR
        events, transitions = (pq.read_table(state / name) for name in ("edges-1.parquet", "edges-1-transitions.parquet"))
        assert transitions.num_rows > 0
        (state / "edges-1-transitions.parquet").unlink()
        pq.write_table(pa.concat_tables([events, transitions.cast(events.schema)]), state / "edges-1.parquet")
        meta = read_json(state / "state.json")
        write_json(state / "state.json", {**meta, "edge_parts": ["edges.parquet", "edges-1.parquet"]})
        summary = _build_pair(con, DAY0 + timedelta(days=6), settings, full_settings, tmp_path / "c", tmp_path / "c-full",
                              [inc / STATE_DIR])
    assert summary.provenance.mode == "incremental"
    assert _state_parts(tmp_path / "c") == ["edges.parquet", "edges-1.parquet", "edges-2.parquet", "edges-2-transitions.parquet"]


@pytest.mark.parametrize("change", ["ts", "dst"])
def test_an_event_replaced_in_a_covered_day_makes_the_state_stale(tiny, tmp_path, change):
    """Same number of events that day, so only the checksum can tell: the state is not advanced. The
    edit bypasses the loader, so only a scan of the log sees it (``snapshot_scan_days``)."""
    base, inc, full = (tmp_path / name for name in ("base", "inc", "full"))
    for folder in (base, inc, full):
        folder.mkdir()
    settings = Settings.from_mapping({}, threads=1, snapshot_scan_days=True)
    with connect(tiny) as con:
        build_snapshot(con, DAY0 + timedelta(days=3), settings, base)
        replaced = {"ts": "ts = ts + INTERVAL 1 HOUR", "dst": "dst = 11"}[change]
        con.execute(f"UPDATE events SET {replaced} WHERE src = 1 AND ts = ?", [DAY0 + timedelta(days=1)])
        summary = build_snapshot(con, DAY0 + timedelta(days=4), settings, inc, states=[base / "state"])
        build_snapshot(con, DAY0 + timedelta(days=4), Settings.from_mapping({}, threads=1, snapshot_incremental=False), full)
    assert summary.provenance.mode == "full" and summary.provenance.stale == (base / "state",)
    assert summary.provenance.first_late_day == (DAY0 + timedelta(days=1)).date()
    _assert_same_snapshot(inc, full)


def test_a_state_built_with_other_half_lives_is_not_advanced(tiny, tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    with connect(tiny, read_only=True) as con:
        build_snapshot(con, DAY0 + timedelta(days=3), Settings.from_mapping({}, threads=1), first)
        changed = Settings.from_mapping({}, threads=1, half_life_days={"click": 1.0})
        summary = build_snapshot(con, DAY0 + timedelta(days=4), changed, second, states=[first / "state"])
    assert summary.provenance.mode == "full"
    click = _edges_by_entity(second)[(1, 10, "click")]
    assert click["weight"] == pytest.approx(2 ** -3 + 2 ** -1)


def test_a_state_fingerprinted_with_another_checksum_is_rebuilt_without_reporting_late_events(tiny, tmp_path):
    """A state from before a change of DAY_CHECKSUM: every day would look changed, which is no late event."""
    from hir.storage import read_json, write_json

    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    settings = Settings.from_mapping({}, threads=1)
    with connect(tiny, read_only=True) as con:
        build_snapshot(con, DAY0 + timedelta(days=3), settings, first)
        meta = read_json(first / "state" / "state.json")
        write_json(first / "state" / "state.json", {**meta, "day_checksum": "bit_xor(hash(src, dst, event_type, ts))"})
        summary = build_snapshot(con, DAY0 + timedelta(days=4), settings, second, states=[first / "state"])
    assert summary.provenance == Provenance("full")


def test_configure_sets_the_memory_cap_and_a_spill_folder_it_creates(tmp_path):
    from hir.graph.snapshot import configure

    spill = tmp_path / "a" / "b"
    with connect(":memory:") as con:
        configure(con, Settings.from_mapping({}, threads=1, duckdb_memory_limit="300MB", duckdb_temp_directory=str(spill)))
        temp, limit = con.execute("SELECT current_setting('temp_directory'), current_setting('memory_limit')").fetchone()
    assert spill.is_dir() and temp == str(spill)
    assert limit == "286.1 MiB"  # 300 MB
