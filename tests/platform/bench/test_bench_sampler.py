"""`hir bench sampler`: a snapshot under the data home when there is one, else a synthetic graph."""

from __future__ import annotations

import argparse
import json

import pyarrow as pa
import pyarrow.parquet as pq
from hir.cli.bench import sampler as bench
from hir.settings import Settings


def _args(**overrides) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args([f"--{k}={v}" for k, v in {"batch": 8, "batches": 2, "nodes": 300, "edges": 3000, **overrides}.items()])


def test_synthetic_graph_when_no_snapshot(data_home):
    result = bench.run(_args(), Settings.from_env())
    assert result["graph"].startswith("synthetic:300n/3000e")
    assert result["nodes"] == 300 and result["edges"] == 6000
    assert result["anchors_per_s"] > 0 and result["tokens_per_s"] >= result["anchors_per_s"]
    assert 1 <= result["tokens_per_view"] <= 128


def test_latest_snapshot_is_used(data_home):
    for day, nodes in (("2024-01-01", 3), ("2024-01-02", 4)):
        folder = data_home / "artifacts" / "graph_snapshot" / day
        folder.mkdir(parents=True)
        pq.write_table(pa.table({
            "entity_id": pa.array(range(nodes), pa.int64()), "entity_type": ["user"] * nodes, "type_id": pa.array([0] * nodes, pa.int64()),
            "degree": [1.0] * nodes, "age_days": [1.0] * nodes, "activity": [1.0] * nodes,
        }), folder / "nodes.parquet")
        pq.write_table(pa.table({
            "src": pa.array([0, 1], pa.int64()), "dst": pa.array([1, 2], pa.int64()), "edge_type": ["click"] * 2,
            "edge_type_id": pa.array([0, 0], pa.int64()), "count": pa.array([1, 1], pa.int64()), "last_ts": [1.0, 2.0], "weight": [1.0, 0.5],
        }), folder / "edges.parquet")
        (folder / "meta.json").write_text(json.dumps({"cutoff": 10.0, "node_types": ["user"], "edge_types": ["click"]}))
    result = bench.run(_args(), Settings.from_env())
    assert result["graph"].startswith("snapshot:") and result["graph"].endswith("2024-01-02")
    assert result["nodes"] == 4 and result["edges"] == 4
