"""Online feature latency: Feast SDK and HTTP feature server against a direct SQLite read (the floor).

In a temporary data home, random embeddings of ``--population`` users and ads go through the same
path as the pipeline (feature tables → apply → materialise). Then ``--lookups`` times, ``--entities``
random (user, ad) pairs are read as the ``ranker_v1`` feature service three ways:
``get_online_features`` in process (p50, p99), the same rows straight from the SQLite online store
(query + value decoding, the floor), and a POST to the feature server's ``/get-online-features``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Mapping

import numpy as np
import pyarrow as pa

from hir.partitions import cutoff_of
from hir.serving.feast_store import (
    RANKER_SERVICE,
    RANKER_TYPES,
    FeastStore,
    join_key,
    view_name,
    write_feature_tables,
)
from hir.settings import Settings
from hir.storage import Artifacts, atomic_dir, write_parquet


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--entities", type=int, default=100, help="(user, ad) pairs per lookup")
    parser.add_argument("--lookups", type=int, default=200, help="lookups timed per method")
    parser.add_argument("--population", type=int, default=5000, help="users and ads in the store (each)")
    parser.add_argument("--dim", type=int, default=64, help="embedding dimension")
    parser.add_argument("--seed", type=int, default=0)


def write_fake_upstream(artifacts_dir: Path, partition: str, counts: Mapping[str, int], dim: int,
                        seed: int = 0, with_tokens: bool = True, model_version: str = "fake") -> dict[str, np.ndarray]:
    """Write random ``entity_embeddings`` (and ``bom_tokens``) files of ``partition`` in their contracts.

    Args:
        artifacts_dir: the data home's artefact folder.
        partition: day ``YYYY-MM-DD``; rows carry its cut-off.
        counts: entities per type; keys are ``<type>-<i>``, entity ids are dense across types.
        dim: embedding dimension d; vectors are standard normal, seeded by ``seed``.
        with_tokens: also write tokens (3 per entity, token = level * 1_000_000 + code).
        model_version: the model_version column.
    Returns ``{type: embeddings array [n, d]}`` in key order.
    """
    rng = np.random.default_rng(seed)
    cutoff = cutoff_of(partition)
    rows, vectors, next_id = [], {}, 0
    for t, n in counts.items():
        vectors[t] = rng.standard_normal((n, dim)).astype(np.float32)
        rows.append((np.arange(next_id, next_id + n), [t] * n, [f"{t}-{i}" for i in range(n)]))
        next_id += n
    ids = np.concatenate([r[0] for r in rows]).astype(np.int64)
    flat = np.concatenate([vectors[t] for t in counts]).reshape(-1) if counts else np.zeros(0, np.float32)
    stamp = pa.repeat(pa.scalar(cutoff, pa.timestamp("us", tz="UTC")), ids.size)
    emb = pa.table({
        "entity_id": ids,
        "entity_type": sum((r[1] for r in rows), []),
        "source_key": sum((r[2] for r in rows), []),
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(flat, pa.float32()), dim),
        "coarse_prototype": pa.array(ids % 7, pa.int32()),
        "fine_prototype": pa.array(ids % 5, pa.int32()),
        "model_version": [model_version] * ids.size,
        "cutoff": stamp,
    })
    catalogue = Artifacts(artifacts_dir)
    write_parquet(catalogue.embeddings(partition), emb)
    if with_tokens:
        tokens = [[int(i % 7), 1_000_000 + int(i % 5), 2_000_000 + int(i % 3)] for i in ids]
        tok = pa.table({"entity_id": ids, "entity_type": emb.column("entity_type"), "source_key": emb.column("source_key"),
                        "tokens": pa.array(tokens, pa.list_(pa.int64())),
                        "weights": pa.array([[1.0, 0.5, 0.25]] * ids.size, pa.list_(pa.float32())), "cutoff": stamp})
        write_parquet(catalogue.tokens(partition), tok)
    return vectors


def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(data_home: Path, port: int, timeout_s: float = 60.0) -> subprocess.Popen:
    """Start ``hir serve`` on 127.0.0.1:``port`` in its own process group; wait until /health answers.

    Raises ``RuntimeError`` (after stopping it) when it exits or does not answer within ``timeout_s``.
    """
    env = dict(os.environ, HIR_DATA_HOME=str(data_home))
    proc = subprocess.Popen([sys.executable, "-m", "hir.cli.main", "serve", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"hir serve exited with {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                if resp.status == 200:
                    return proc
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.3)
    stop_server(proc)
    raise RuntimeError(f"hir serve did not answer on port {port} within {timeout_s:.0f}s")


def stop_server(proc: subprocess.Popen) -> None:
    """Terminate the server's process group (gunicorn and its worker), killing it after 10 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    if proc.stderr:
        proc.stderr.close()


def post_online(port: int, body: dict) -> dict:
    """POST ``body`` to the feature server's ``/get-online-features``; the decoded JSON answer."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/get-online-features", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def _sqlite_reader(db_path: Path, store):
    """A function reading and decoding the ranker_v1 rows of given keys straight from SQLite."""
    from feast.infra.key_encoding_utils import serialize_entity_key
    from feast.protos.feast.types.EntityKey_pb2 import EntityKey
    from feast.protos.feast.types.Value_pb2 import Value

    con = sqlite3.connect(str(db_path))

    def encode(t: str, key: str) -> bytes:
        ek = EntityKey(join_keys=[join_key(t)], entity_values=[Value(string_val=key)])
        return serialize_entity_key(ek, entity_key_serialization_version=store.config.entity_key_serialization_version)

    def read(keys: Mapping[str, list[str]]) -> int:
        decoded = 0
        for t, values in keys.items():
            blobs = [encode(t, k) for k in values]
            sql = (f'SELECT entity_key, feature_name, value FROM "{store.project}_{view_name(t)}" '
                   f"WHERE entity_key IN ({','.join('?' * len(blobs))})")
            for _key, _name, value in con.execute(sql, blobs):
                Value.FromString(value)
                decoded += 1
        return decoded

    return read, con


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ms = np.asarray(samples) * 1000.0
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


def run(args: argparse.Namespace, settings: Settings) -> dict:
    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory(prefix="hir-bench-feast-") as tmp:
        home = Path(tmp)
        settings = settings.replace(data_home=home)
        partition = "2026-01-01"
        write_fake_upstream(settings.artifacts_dir, partition, {t: args.population for t in RANKER_TYPES}, args.dim, args.seed)
        catalogue = Artifacts(settings.artifacts_dir)
        with atomic_dir(catalogue.folder("feature_tables", partition)) as out:
            write_feature_tables(catalogue.embeddings(partition), catalogue.tokens(partition), cutoff_of(partition), out)
        feast = FeastStore.from_settings(settings)
        store = feast.store()
        with contextlib.redirect_stdout(sys.stderr):
            feast.apply(store)
            feast.materialize(cutoff_of(partition), cutoff_of(partition), RANKER_TYPES, store)
        print(f"bench feast: {args.population} users and ads materialised; timing {args.lookups} lookups", file=sys.stderr)
        batches = [{join_key(t): [f"{t}-{i}" for i in rng.integers(0, args.population, args.entities)] for t in RANKER_TYPES}
                   for _ in range(args.lookups)]
        service = store.get_feature_service(RANKER_SERVICE)
        sdk = _timed(lambda b: store.get_online_features(features=service, entity_rows=b, full_feature_names=True).to_dict(), batches)
        read, con = _sqlite_reader(feast.online_path, store)
        try:
            direct = _timed(lambda b: read({t: b[join_key(t)] for t in RANKER_TYPES}), batches)
        finally:
            con.close()
        port = free_port()
        proc = start_server(home, port)
        try:
            http = _timed(lambda b: post_online(port, {"feature_service": RANKER_SERVICE, "entities": b,
                                                         "full_feature_names": True}), batches)
        finally:
            stop_server(proc)
    p50, p99 = _percentiles(sdk)
    return {"entities": args.entities, "dim": args.dim, "p50_ms": round(p50, 3), "p99_ms": round(p99, 3),
            "sqlite_direct_p50_ms": round(_percentiles(direct)[0], 3), "http_p50_ms": round(_percentiles(http)[0], 3)}


def _timed(fn, batches: list) -> list[float]:
    """Seconds per call of ``fn`` on each batch, after one untimed warm-up call."""
    fn(batches[0])
    out = []
    for batch in batches:
        start = time.perf_counter()
        fn(batch)
        out.append(time.perf_counter() - start)
    return out
