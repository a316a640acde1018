"""Edge aggregation of one graph-snapshot cut-off: DuckDB against plain pandas on the same Parquet log.

`hir bench snapshot --events N` writes a synthetic event log of ``N`` events once (untimed), then
times, in this process and on the same file, the aggregation the ``graph_snapshot`` asset runs:
read the events, keep ``ts < T``, add each user's purchase-to-purchase transitions (``followed_by``,
see :mod:`hir.snapshot`), aggregate per ``(src, dst, event_type)`` into count, first and last time
and decayed weight ``Σ 2^(-(T - ts)/half_life)``, and write the edges as Parquet.

* DuckDB runs :data:`hir.snapshot.EDGES` — the very SQL of the asset — over a view of the file
  (after building the edge-type table with its half-lives, as the asset does).
* pandas runs what a user would write: ``read_parquet``, a boolean filter, a sort and ``shift``
  for the transitions, ``map`` for the half-lives, ``groupby(...).agg(...)``, ``to_parquet``.

Both outputs are compared (sorted; counts and times equal, weights ``allclose``) before the
figures are reported. Each side runs ``--repeat`` times, alternating; the fastest run counts.
Beside the issue's wall-clock figures the result carries the fastest process CPU time of each
side (all threads; it varies little with other load), ``duckdb_threads`` and the 1-minute load
average: on a shared machine the load says how far the wall-clock figures can be trusted.

The log: users revisit the items of a small personal pool (70 % of events) and otherwise draw
from a Zipf(1.1) item popularity; user activity is log-normal; behaviours are pv/cart/fav/buy at
88/6/3/3 %, times uniform over 28 days in time order (as a real log is), cut-off after day 21.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa

from hir.settings import Settings, SettingsError

DAY0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
DAYS = 28
CUTOFF = DAY0 + timedelta(days=21)
BEHAVIOURS = np.array(["pv", "cart", "fav", "buy"])
BEHAVIOUR_P = [0.88, 0.06, 0.03, 0.03]
POOL = 16  # items a user keeps coming back to
REVISIT = 0.7  # share of events that revisit the pool


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=5_000_000, help="events in the synthetic log")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per side; the fastest counts")
    parser.add_argument("--seed", type=int, default=0)


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


def duckdb_edges(events_path: Path, out_path: Path, settings: Settings) -> None:
    """The asset's edge SQL (:data:`~hir.snapshot.NAMED_EDGES`) over the Parquet log, written with ``COPY``."""
    import duckdb

    from hir.snapshot import NAMED_EDGES, configure, copy_to_parquet, edge_params, prepare_edge_types

    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        configure(con, settings)
        con.read_parquet(str(events_path)).create_view("events")
        con.execute("CREATE TABLE relations (src BIGINT, dst BIGINT, relation VARCHAR, valid_from TIMESTAMPTZ)")
        prepare_edge_types(con, settings)
        copy_to_parquet(con, NAMED_EDGES, out_path, edge_params(CUTOFF, settings))
    finally:
        con.close()


def pandas_edges(events_path: Path, out_path: Path, settings: Settings) -> None:
    """The same aggregation as a pandas user writes it."""
    import pandas as pd

    from hir.snapshot import FOLLOWED_BY

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


def same_edges(a: Path, b: Path) -> bool:
    """Whether two edge files hold the same rows: keys, counts and times equal, weights allclose."""
    import pandas as pd

    frames = []
    for path in (a, b):
        df = pd.read_parquet(path).sort_values(["src", "dst", "edge_type"], ignore_index=True)
        for col in ("last_ts", "first_ts"):
            df[col] = df[col].dt.tz_convert("UTC").astype("datetime64[us, UTC]").astype("int64")
        frames.append(df)
    x, y = frames
    if len(x) != len(y):
        return False
    exact = all((x[c].to_numpy() == y[c].to_numpy()).all() for c in ("src", "dst", "edge_type", "count", "last_ts", "first_ts"))
    return bool(exact and np.allclose(x["weight"].to_numpy(), y["weight"].to_numpy(), rtol=1e-9, atol=0.0))


def _progress(message: str) -> None:
    print(f"[bench snapshot] {message}", file=sys.stderr, flush=True)


def _timed(fn, *args) -> tuple[float, float]:
    """Wall-clock and process CPU seconds (all threads) of ``fn(*args)``."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - wall, time.process_time() - cpu


def run(args: argparse.Namespace) -> dict:
    if args.events < 1 or args.repeat < 1:
        raise SettingsError(f"--events ({args.events}) and --repeat ({args.repeat}) must be at least 1")
    settings = Settings.from_env()
    path = events_file(settings, args.events, args.seed)
    sides = {"duckdb": duckdb_edges, "pandas": pandas_edges}
    wall = {name: float("inf") for name in sides}
    cpu = {name: float("inf") for name in sides}
    with tempfile.TemporaryDirectory(prefix="hir-bench-snapshot-") as tmp:
        outputs = {name: Path(tmp) / f"edges_{name}.parquet" for name in sides}
        for i in range(args.repeat):
            for name, fn in sides.items():
                w, c = _timed(fn, path, outputs[name], settings)
                wall[name], cpu[name] = min(wall[name], w), min(cpu[name], c)
            _progress(f"run {i + 1}/{args.repeat}: duckdb {wall['duckdb']:.2f}s, pandas {wall['pandas']:.2f}s (best so far)")
        if not same_edges(outputs["duckdb"], outputs["pandas"]):
            raise AssertionError("DuckDB and pandas edges differ")
    return {
        "events": args.events,
        "duckdb_s": round(wall["duckdb"], 3),
        "pandas_s": round(wall["pandas"], 3),
        "speedup_vs_pandas": round(wall["pandas"] / wall["duckdb"], 2),
        "events_per_s": round(args.events / wall["duckdb"]),
        "duckdb_cpu_s": round(cpu["duckdb"], 3),
        "pandas_cpu_s": round(cpu["pandas"], 3),
        "duckdb_threads": settings.threads,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
