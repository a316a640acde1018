"""`hir bench snapshot`: the synthetic log, the DuckDB and pandas sides agreeing, the reported figures."""

from __future__ import annotations

import argparse
from datetime import timedelta

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from hir.cli.bench import snapshot as bench
from hir.graph.warehouse import connect, event_days_complete
from hir.settings import Settings


def _args(**overrides) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args([f"--{k}={v}" for k, v in {"events": 4000, "repeat": 1, **overrides}.items()])


def test_log_has_revisits_and_skewed_popularity():
    log = bench.synthetic_log(20_000, seed=1).to_pandas()
    assert len(log) == 20_000 and log["ts"].is_monotonic_increasing
    pairs = log.groupby(["src", "dst"]).size()
    assert len(pairs) < 0.6 * len(log)  # users come back to their items
    items = log["dst"].value_counts()
    assert items.iloc[: len(items) // 100 + 1].sum() > 0.1 * len(log)  # the top 1 % of items draw > 10 %
    assert set(log["event_type"]) == {"pv", "cart", "fav", "buy"}


def test_both_sides_write_the_same_edges(data_home, tmp_path):
    settings = Settings.from_env()
    path = bench.events_file(settings, 3000, seed=2)
    assert bench.duckdb_state(bench.events_warehouse(settings, path), tmp_path / "d", settings) == "full"
    bench.pandas_edges(path, tmp_path / "p.parquet", settings)
    edges = bench.state_edges(tmp_path / "d")
    assert bench.same_edges(edges, pd.read_parquet(tmp_path / "p.parquet"))
    assert (edges["last_ts"] < bench.CUTOFF).all() and edges["count"].sum() < 3000
    assert (edges["edge_type"] == "followed_by").any()  # the transitions are compared too

    # A single changed weight is caught.
    changed = pd.read_parquet(tmp_path / "p.parquet")
    changed.loc[0, "weight"] = np.nextafter(changed.loc[0, "weight"], 10) * (1 + 1e-6)
    assert not bench.same_edges(edges, changed)


def test_the_incremental_side_writes_the_full_sides_state(data_home, tmp_path):
    settings = Settings.from_env()
    warehouse = bench.events_warehouse(settings, bench.events_file(settings, 3000, seed=2))
    bench.duckdb_state(warehouse, tmp_path / "base", settings, bench.CUTOFF - timedelta(days=1))
    assert bench.duckdb_state(warehouse, tmp_path / "inc", settings, states=[tmp_path / "base"]) == "incremental"
    bench.duckdb_state(warehouse, tmp_path / "full", settings)
    assert bench.same_state(tmp_path / "inc", tmp_path / "full")
    with connect(warehouse, read_only=True) as con:  # the steps read the loader's day fingerprints ...
        assert event_days_complete(con)
    bench.duckdb_state(warehouse, tmp_path / "scan", settings.replace(snapshot_scan_days=True))
    assert bench.same_state(tmp_path / "scan", tmp_path / "full")  # ... which equal a scan of the log
    assert not bench.same_state(tmp_path / "base", tmp_path / "full")  # a day apart: they differ

    # The increment's sequence part holds the day's users only; a user's carried last item that
    # differs is caught.
    newest = tmp_path / "inc" / "sequences-1.parquet"
    sequences = pq.read_table(newest).to_pandas()
    assert 0 < len(sequences) < len(bench.state_sequences(tmp_path / "inc"))
    sequences.loc[0, "dst"] += 1
    sequences.to_parquet(newest, index=False)
    assert not bench.same_state(tmp_path / "inc", tmp_path / "full")


def _ratio_of_rounded(ratio: float, num: float, den: float) -> bool:
    """Whether ``ratio`` (rounded to 2 decimals) is ``num / den`` of the unrounded times that round
    to ``num`` and ``den`` (3 decimals): at a few milliseconds the rounding alone moves it by 10 %."""
    half = 5e-4
    return (num - half) / (den + half) - 5e-3 <= ratio <= (num + half) / max(den - half, 1e-9) + 5e-3


def test_run_reports_the_issue_figures(data_home):
    result = bench.run(_args(), Settings.from_env())
    assert set(result) >= {"events", "duckdb_s", "pandas_s", "speedup_vs_pandas", "events_per_s",
                           "incremental_s", "incremental_speedup", "edge_write_s", "connect_s", "peak_rss_mb"}
    assert result["events"] == 4000
    assert _ratio_of_rounded(result["speedup_vs_pandas"], result["pandas_s"], result["duckdb_s"])
    assert _ratio_of_rounded(result["incremental_speedup"], result["duckdb_s"], result["incremental_s"])
    assert 0 < result["edge_write_s"] < result["duckdb_s"] and result["connect_s"] > 0
    assert result["peak_rss_mb"] > 0
    assert (data_home / "bench" / "snapshot_events_4000_0.parquet").exists()
    assert (data_home / "bench" / "snapshot_events_4000_0.duckdb").exists()


def test_a_runs_output_is_removed_before_the_next_one_is_timed(tmp_path):
    """The asset writes each state into a new scratch folder: the next run must not pay for deleting it."""
    folder, file = tmp_path / "state", tmp_path / "pandas.parquet"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "edges.parquet").write_bytes(b"x")
    file.write_bytes(b"x")
    for path in (folder, file, tmp_path / "never-written"):
        bench._remove(path)
        assert not path.exists()


def test_run_without_pandas_reports_duckdb_only(data_home):
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    result = bench.run(parser.parse_args(["--events=4000", "--repeat=1", "--no-pandas"]), Settings.from_env())
    assert result["pandas_s"] is None and result["speedup_vs_pandas"] is None
    assert result["incremental_speedup"] > 0
