"""Edge state of one graph-snapshot cut-off: DuckDB (full rebuild and one-day increment) against pandas.

`hir bench snapshot --events N` writes a synthetic event log of ``N`` events once (untimed), as a
Parquet file and as a warehouse (a DuckDB file whose ``events`` and day fingerprints
``event_days`` the loader's :func:`hir.graph.warehouse.append_events` wrote, in time order), then
times, in this process and on the same events, the edge computation the ``graph_snapshot`` asset
runs: read the events, keep ``ts < T``, add each user's purchase-to-purchase transitions
(``followed_by``, see :mod:`hir.graph.snapshot`), aggregate per ``(src, dst, event_type)`` into count,
first and last time and decayed weight ``Σ 2^(-(T - ts)/half_life)``, and write them as Parquet.

* **full**: :func:`hir.graph.snapshot.build_edge_state` — the very code of the asset — on a read-only
  connection to the warehouse, from the whole log; it also writes the sequence state and the day
  fingerprints.
* **incremental**: the same function advancing the state at ``T - 1 day`` (built once, untimed)
  by the events of the last day: the daily refresh, which adds the day's event and transition rows
  and its users' last items as delta parts (see :mod:`hir.graph.snapshot`). Its state, parts merged, must equal the full one (edges with weights
  ``allclose``, sequence and day tables equal).
* **pandas** runs what a user would write for the edges alone, from the Parquet log (pandas' fastest
  reader; the warehouse holds the same rows): ``read_parquet``, a boolean filter,
  a sort and ``shift`` for the transitions, ``map`` for the half-lives, ``groupby(...).agg(...)``,
  ``to_parquet``. Its edges must equal the full state's (sorted; counts and times equal, weights
  ``allclose``). It is skipped above 10 M events (or with ``--no-pandas``).

``speedup_vs_pandas`` is pandas over full, ``incremental_speedup`` full over incremental. Each DuckDB
run opens its own read-only connection to the warehouse, as the asset does, and is timed from the
open connection on; ``connect_s`` is the fastest open (the asset's fixed cost, which its nodes, edges
and checks share). Each side
runs ``--repeat`` times, alternating; the fastest run counts. Each run writes where nothing is, as the
asset writes into a new scratch partition: the previous run's output is removed before the clock
starts. ``edge_write_s`` times the Parquet write of the full edge table alone (the full state's
edges, from memory, in the state's format): what a compaction, every ``COMPACT_STEPS`` days, pays
beyond the day's work, and what an increment no longer pays. Beside the wall-clock figures the
result carries the fastest process CPU time of each side (all threads; it varies less with other
load), ``duckdb_threads``, the memory cap DuckDB spills past (``HIR_DUCKDB_MEMORY_LIMIT``),
``peak_rss_mb`` — the most resident memory of the process over the DuckDB runs (its count is
restarted before each; the log is written before) — and the 1-minute load average: on a shared
machine the load says how far the wall-clock figures can be trusted.

The log: users revisit the items of a small personal pool (70 % of events) and otherwise draw
from a Zipf(1.1) item popularity; user activity is log-normal; behaviours are pv/cart/fav/buy at
88/6/3/3 %, times uniform over 28 days in time order (as a real log is), cut-off after day 21.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa

from hir.errors import SettingsError
from hir.settings import Settings

DAY0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
DAYS = 28
CUTOFF = DAY0 + timedelta(days=21)
BEHAVIOURS = np.array(["pv", "cart", "fav", "buy"])
BEHAVIOUR_P = [0.88, 0.06, 0.03, 0.03]
POOL = 16  # items a user keeps coming back to
REVISIT = 0.7  # share of events that revisit the pool
PANDAS_MAX_EVENTS = 10_000_000  # above this the pandas side would need more memory than the machine class has


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=5_000_000, help="events in the synthetic log")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per side; the fastest counts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-pandas", action="store_true",
                        help=f"skip the pandas side (always skipped above {PANDAS_MAX_EVENTS:,} events)")


def synthetic_log(events: int, seed: int) -> pa.Table:
    """``src, dst, event_type, ts, value`` with user revisits and Zipf-skewed item popularity.

    Users are ids ``0 … U-1`` (``U = events / 100``), items follow (``events / 25`` of them).
    """
    rng = np.random.default_rng(seed)
    users, items = max(1, events // 100), max(1, events // 25)
    activity = rng.lognormal(0.0, 1.0, users)
    user = rng.choice(users, events, p=activity / activity.sum())
    popularity = 1.0 / np.arange(1, items + 1) ** 1.1
    popularity /= popularity.sum()
    pool = rng.choice(items, (users, POOL), p=popularity)
    slot = np.minimum(rng.geometric(0.3, events) - 1, POOL - 1)
    fresh = rng.choice(items, events, p=popularity)
    item = rng.permutation(items)[np.where(rng.random(events) < REVISIT, pool[user, slot], fresh)]
    seconds = np.sort(rng.integers(0, DAYS * 86400, events))
    ts = np.datetime64(DAY0.replace(tzinfo=None), "us") + seconds.astype("timedelta64[s]")
    kind = rng.choice(len(BEHAVIOURS), events, p=BEHAVIOUR_P)
    return pa.table(
        {
            "src": pa.array(user, pa.int64()),
            "dst": pa.array(users + item, pa.int64()),
            "event_type": pa.array(BEHAVIOURS[kind], pa.string()),
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "value": pa.array(np.ones(events), pa.float64()),
        }
    )


def events_file(settings: Settings, events: int, seed: int) -> Path:
    """The log for ``(events, seed)`` under ``<data home>/bench/``, written once and reused."""
    from hir.storage import write_parquet

    path = settings.data_home / "bench" / f"snapshot_events_{events}_{seed}.parquet"
    if not path.exists():
        _progress(f"writing {events:,} synthetic events to {path}")
        write_parquet(path, synthetic_log(events, seed))
    return path


def events_warehouse(settings: Settings, log: Path) -> Path:
    """A warehouse beside ``log`` holding its events (in the log's time order) and their day
    fingerprints, loaded once by the loader's :func:`hir.graph.warehouse.append_events` and reused."""
    from hir.graph.warehouse import append_events, connect
    from hir.storage import atomic_path

    path = log.with_suffix(".duckdb")
    if not path.exists():
        _progress(f"loading {log.name} into the warehouse {path}")
        with atomic_path(path) as tmp:
            with connect(tmp) as con:
                con.read_parquet(str(log)).create_view("log")
                append_events(con, "log")
                con.execute("DROP VIEW log")
    return path


def duckdb_state(warehouse: Path, out_dir: Path, settings: Settings, cutoff: datetime = CUTOFF,
                 states: Sequence[Path] = ()) -> str:
    """The asset's edge state (:func:`hir.graph.snapshot.build_edge_state`) from ``warehouse``, written
    into ``out_dir``: a full rebuild, or an increment from one of ``states``.

    Returns the build mode (``"full"`` or ``"incremental"``).
    """
    return timed_state(warehouse, out_dir, settings, cutoff, states)[1]


def timed_state(warehouse: Path, out_dir: Path, settings: Settings, cutoff: datetime = CUTOFF,
                states: Sequence[Path] = ()) -> tuple[tuple[float, float], str, float]:
    """:func:`duckdb_state` on a fresh read-only connection, timed from the open connection on:
    ``((wall, cpu) seconds of the state step, build mode, wall seconds to open the connection)``.
    Opening the warehouse is the asset's fixed cost, shared with the rest of its snapshot."""
    from hir.graph.snapshot import build_edge_state, configure
    from hir.graph.warehouse import connect

    opened = time.perf_counter()
    with connect(warehouse, read_only=True) as con:
        configure(con, settings)
        connect_s = time.perf_counter() - opened
        seconds, provenance = _timed(lambda: build_edge_state(con, cutoff, settings, out_dir, states))
    return seconds, provenance.mode, connect_s


def pandas_edges(events_path: Path, out_path: Path, settings: Settings) -> None:
    """The same aggregation as a pandas user writes it."""
    import pandas as pd

    from hir.graph.snapshot import FOLLOWED_BY

    df = pd.read_parquet(events_path)
    df = df[df["ts"] < CUTOFF]
    seq = df[df["event_type"].isin(settings.sequence_event_types)].sort_values(["src", "event_type", "ts", "dst"])
    previous = seq.shift()
    follows = (seq["src"] == previous["src"]) & (seq["event_type"] == previous["event_type"]) & (seq["dst"] != previous["dst"])
    transitions = seq[follows].assign(src=previous.loc[follows, "dst"].astype("int64"), event_type=FOLLOWED_BY)
    df = pd.concat([df, transitions], ignore_index=True)
    half_life = df["event_type"].map(dict(settings.half_life_days)).fillna(settings.default_half_life_days)
    age_days = (CUTOFF - df["ts"]).dt.total_seconds() / 86400.0
    df = df.assign(weight=np.exp2(-age_days / half_life))
    edges = (
        df.groupby(["src", "dst", "event_type"], sort=False)
        .agg(count=("ts", "size"), last_ts=("ts", "max"), first_ts=("ts", "min"), weight=("weight", "sum"))
        .reset_index()
        .rename(columns={"event_type": "edge_type"})
    )
    edges.to_parquet(out_path, index=False)


def state_edges(folder: Path):
    """A written edge state's edges at its cut-off as the snapshot reads them
    (:func:`hir.graph.snapshot.load_state_edges`: its parts merged), with type names instead of ids."""
    import duckdb

    from hir.graph.snapshot import drop_state_edges, load_state_edges
    from hir.storage import read_json

    names = read_json(folder / "state.json")["edge_types"]
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        load_state_edges(con, folder)
        edges = con.sql("SELECT * FROM snap_state_edges").df()
        drop_state_edges(con)
    finally:
        con.close()
    edges["edge_type"] = np.asarray(names, dtype=object)[edges.pop("edge_type_id").to_numpy()]
    return edges


def same_edges(a, b) -> bool:
    """Whether two edge frames hold the same rows: keys, counts and times equal, weights allclose."""
    frames = []
    for df in (a, b):
        df = df.sort_values(["src", "dst", "edge_type"], ignore_index=True)
        for col in ("last_ts", "first_ts"):
            df[col] = df[col].dt.tz_convert("UTC").astype("datetime64[us, UTC]").astype("int64")
        frames.append(df)
    x, y = frames
    if len(x) != len(y):
        return False
    exact = all((x[c].to_numpy() == y[c].to_numpy()).all() for c in ("src", "dst", "edge_type", "count", "last_ts", "first_ts"))
    return bool(exact and np.allclose(x["weight"].to_numpy(), y["weight"].to_numpy(), rtol=1e-9, atol=0.0))


def state_sequences(folder: Path):
    """A written edge state's last item per user and sequence type (:data:`hir.graph.snapshot.STATE_SEQUENCES`:
    its sequence parts merged), sorted."""
    import duckdb

    from hir.graph.snapshot import STATE_SEQUENCES, read_state

    state = read_state(folder)
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        parts = [str(folder / name) for name in state.sequence_parts]
        df = con.execute(STATE_SEQUENCES, {"sequence_parts": parts}).df()
    finally:
        con.close()
    return df.sort_values(["src", "event_type"], ignore_index=True)


def same_state(a: Path, b: Path) -> bool:
    """Whether two edge states agree: :func:`same_edges`, and equal sequence and day tables."""
    import pandas as pd

    def days(folder: Path):
        return pd.read_parquet(folder / "days.parquet").sort_values("day", ignore_index=True)

    return (same_edges(state_edges(a), state_edges(b)) and state_sequences(a).equals(state_sequences(b))
            and days(a).equals(days(b)))


def edge_write_seconds(state: Path, settings: Settings, repeat: int) -> float:
    """The fastest of ``repeat`` writes of ``state``'s edge table, loaded into memory first, as the
    edge state writes a base part (:data:`hir.graph.snapshot.BASE_PART_FORMAT`)."""
    import duckdb

    from hir.graph.snapshot import BASE_PART_FORMAT, configure

    con = duckdb.connect()
    try:
        configure(con, settings)
        con.execute("CREATE TABLE edges AS SELECT * FROM read_parquet(?)", [str(state / "edges.parquet")])
        path = str(state.parent / "edge_write.parquet")
        return min(_timed(lambda: con.execute(f"COPY edges TO $path {BASE_PART_FORMAT}", {"path": path}))[0][0] for _ in range(repeat))
    finally:
        con.close()


def _remove(path: Path) -> None:
    """Remove a side's output of the previous run, before its clock starts: the asset writes each state
    into a new scratch folder, so a timed run should not pay for deleting the last one's files (up to
    about 10 ms for a day's part, more for the full edge table)."""
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _reset_peak_rss() -> None:
    """Restart this process's peak-RSS count (Linux ``clear_refs``); elsewhere it keeps counting."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _peak_rss_mb() -> float:
    """Peak resident memory of this process and its waited-for children, in MiB (Linux reports KiB)."""
    return max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)) / 1024


def _progress(message: str) -> None:
    print(f"[bench snapshot] {message}", file=sys.stderr, flush=True)


def _timed(fn) -> tuple[tuple[float, float], object]:
    """Wall-clock and process CPU seconds (all threads) of ``fn()``, and what it returned."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return (time.perf_counter() - wall, time.process_time() - cpu), result


def run(args: argparse.Namespace, settings: Settings) -> dict:
    import pandas as pd
    import pyarrow.parquet as pq

    if args.events < 1 or args.repeat < 1:
        raise SettingsError(f"--events ({args.events}) and --repeat ({args.repeat}) must be at least 1")
    path = events_file(settings, args.events, args.seed)
    warehouse = events_warehouse(settings, path)
    with_pandas = not args.no_pandas and args.events <= PANDAS_MAX_EVENTS
    best = {name: (float("inf"), float("inf")) for name in ("full", "incremental", "pandas")}
    peak, connect = 0.0, float("inf")
    with tempfile.TemporaryDirectory(prefix="hir-bench-snapshot-", dir=settings.data_home) as tmp:
        out = {name: Path(tmp) / name for name in ("base", "full", "incremental")}
        out["pandas"] = Path(tmp) / "pandas.parquet"
        duckdb_state(warehouse, out["base"], settings, CUTOFF - timedelta(days=1))  # yesterday's state, untimed
        sides = {
            "full": lambda: timed_state(warehouse, out["full"], settings),
            "incremental": lambda: timed_state(warehouse, out["incremental"], settings, states=[out["base"]]),
            "pandas": lambda: _timed(lambda: pandas_edges(path, out["pandas"], settings))[0],
        }
        for i in range(args.repeat):
            for name, fn in sides.items():
                if name == "pandas" and not with_pandas:
                    continue
                _remove(out[name])
                if name == "pandas":
                    wall, cpu = fn()
                else:
                    _reset_peak_rss()
                    (wall, cpu), mode, connect_s = fn()
                    peak = max(peak, _peak_rss_mb())
                    connect = min(connect, connect_s)
                    if mode != name:
                        raise AssertionError(f"the {name} side ran as {mode}")
                best[name] = tuple(map(min, best[name], (wall, cpu)))
            _progress(f"run {i + 1}/{args.repeat}: " + ", ".join(f"{n} {w:.2f}s" for n, (w, _) in best.items() if w < float("inf")) + " (best so far)")
        if not same_state(out["incremental"], out["full"]):
            raise AssertionError("the incremental and the full edge state differ")
        if with_pandas and not same_edges(state_edges(out["full"]), pd.read_parquet(out["pandas"])):
            raise AssertionError("DuckDB and pandas edges differ")
        edges = pq.ParquetFile(out["full"] / "edges.parquet").metadata.num_rows
        edge_write = edge_write_seconds(out["full"], settings, args.repeat)
    full, incremental, pandas = (best[n] for n in ("full", "incremental", "pandas"))
    return {
        "events": args.events,
        "edges": edges,
        "duckdb_s": round(full[0], 3),
        "pandas_s": round(pandas[0], 3) if with_pandas else None,
        "speedup_vs_pandas": round(pandas[0] / full[0], 2) if with_pandas else None,
        "incremental_s": round(incremental[0], 3),
        "incremental_speedup": round(full[0] / incremental[0], 2),
        "edge_write_s": round(edge_write, 3),
        "connect_s": round(connect, 3),
        "events_per_s": round(args.events / full[0]),
        "duckdb_cpu_s": round(full[1], 3),
        "incremental_cpu_s": round(incremental[1], 3),
        "pandas_cpu_s": round(pandas[1], 3) if with_pandas else None,
        "duckdb_threads": settings.threads,
        "duckdb_memory_limit": settings.duckdb_memory_limit,
        "peak_rss_mb": round(peak),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
