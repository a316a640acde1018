"""Online feature latency through Feast against a direct read of the same store (the floor), for
SQLite and, where Debian's servers are installed, Redis and Postgres (started for the bench on
free loopback ports).

In a temporary data home, random embeddings of ``--population`` users and ads go through the same
path as the pipeline (feature tables → apply → materialise). Then ``--lookups`` times, ``--entities``
random (user, ad) pairs are read as the ``ranker_v1`` feature service: by hir's reader
(``OnlineReader.service``: the store's own ``online_read``; ``p50_ms``, ``p99_ms``), by Feast's
``get_online_features(...).to_dict()`` (``sdk_p50_ms``, what hir read before), straight from the
store (SQLite or Postgres ``SELECT``, one Redis pipeline of ``HMGET``, with value decoding:
``sqlite_direct_p50_ms``, ``redis_direct_p50_ms``, ``postgres_direct_p50_ms``), and, for SQLite, by
a POST to the feature server's ``/get-online-features`` (``http_p50_ms``). ``*over_direct`` is the
p50 over the floor. Redis and Postgres figures carry the prefixes ``redis_`` and ``postgres_``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
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
from typing import Iterator, Mapping

import numpy as np
import pyarrow as pa

from hir.partitions import cutoff_of
from hir.serving.feast_store import (
    FEATURES,
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


def start_server(data_home: Path, port: int, timeout_s: float = 60.0,
                 settings: Mapping[str, str] | None = None) -> subprocess.Popen:
    """Start ``hir serve`` on 127.0.0.1:``port`` in its own process group; wait until /health answers.

    ``settings``: further ``HIR_*`` variables for the server (e.g. its online store). Raises
    ``RuntimeError`` (after stopping it) when it exits or does not answer within ``timeout_s``.
    """
    env = dict(os.environ, **(settings or {}), HIR_DATA_HOME=str(data_home))
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


def stop_server(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    """Stop the server's process group (gunicorn and its worker, redis, postgres) with ``sig``, killing it after 10 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
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


def _entity_key(store, entity_type: str, key: str) -> bytes:
    """The serialised Feast entity key of one source key (what every online store indexes by)."""
    from feast.infra.key_encoding_utils import serialize_entity_key
    from feast.protos.feast.types.EntityKey_pb2 import EntityKey
    from feast.protos.feast.types.Value_pb2 import Value

    ek = EntityKey(join_keys=[join_key(entity_type)], entity_values=[Value(string_val=key)])
    return serialize_entity_key(ek, entity_key_serialization_version=store.config.entity_key_serialization_version)


def _sqlite_reader(db_path: Path, store):
    """A function reading and decoding the ranker_v1 rows of given keys straight from SQLite (the floor)."""
    from feast.protos.feast.types.Value_pb2 import Value

    con = sqlite3.connect(str(db_path))

    def read(keys: Mapping[str, list[str]]) -> int:
        decoded = 0
        for t, values in keys.items():
            blobs = [_entity_key(store, t, k) for k in values]
            sql = (f'SELECT entity_key, feature_name, value FROM "{store.project}_{view_name(t)}" '
                   f"WHERE entity_key IN ({','.join('?' * len(blobs))})")
            for _key, _name, value in con.execute(sql, blobs):
                Value.FromString(value)
                decoded += 1
        return decoded

    return read, con


def _redis_reader(port: int, store):
    """A function reading and decoding the ranker_v1 fields of given keys straight from Redis: one
    pipeline of HMGETs, as Feast lays the hashes out (the floor)."""
    import redis
    from feast.infra.online_stores.helpers import _mmh3
    from feast.protos.feast.types.Value_pb2 import Value

    client = redis.Redis(host="127.0.0.1", port=port)
    project = store.project.encode()
    fields = {t: [_mmh3(f"{view_name(t)}:{f}") for f in FEATURES] for t in RANKER_TYPES}

    def read(keys: Mapping[str, list[str]]) -> int:
        with client.pipeline(transaction=False) as pipe:
            for t, values in keys.items():
                for k in values:
                    pipe.hmget(_entity_key(store, t, k) + project, fields[t])
            replies = pipe.execute()
        return sum(Value.FromString(v) is not None for reply in replies for v in reply if v is not None)

    return read, client


def _postgres_reader(port: int, database: str, store):
    """A function reading and decoding the ranker_v1 rows of given keys straight from Postgres: one
    ``SELECT … WHERE entity_key = ANY(…)`` per view on Feast's tables (the floor)."""
    import psycopg
    from feast.protos.feast.types.Value_pb2 import Value
    from psycopg import sql

    con = psycopg.connect(host="127.0.0.1", port=port, user="hir", dbname=database, autocommit=True)
    queries = {t: sql.SQL("SELECT entity_key, feature_name, value FROM {} WHERE entity_key = ANY(%s)").format(
        sql.Identifier(f"{store.project}_{view_name(t)}")) for t in RANKER_TYPES}

    def read(keys: Mapping[str, list[str]]) -> int:
        decoded = 0
        for t, values in keys.items():
            for _key, _name, value in con.execute(queries[t], ([_entity_key(store, t, k) for k in values],)):
                Value.FromString(value)
                decoded += 1
        return decoded

    return read, con


def _wait_until(ready, proc: subprocess.Popen, what: str, timeout_s: float) -> None:
    """Poll ``ready()`` (False or an exception while starting) until it is true; ``RuntimeError``
    when ``proc`` exits first or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            if ready():
                return
        except Exception:  # not accepting connections yet
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not answer within {timeout_s:.0f}s")


@contextlib.contextmanager
def redis_server(workdir: Path, timeout_s: float = 30.0) -> Iterator[int]:
    """Debian's ``redis-server`` on 127.0.0.1 and a free port (yielded), without persistence, its
    log in ``workdir``, in its own process group; stopped on leaving.

    Raises ``RuntimeError`` when it is not installed or does not answer within ``timeout_s``.
    """
    import redis

    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed (`make test` installs Debian's redis-server)")
    port = free_port()
    proc = subprocess.Popen([binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
                             "--dir", str(workdir), "--logfile", str(Path(workdir) / "redis.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_until(lambda: redis.Redis(host="127.0.0.1", port=port, socket_timeout=2).ping(), proc, "redis-server",
                    timeout_s)
        yield port
    finally:
        stop_server(proc)


def postgres_binary(name: str) -> str | None:
    """A PostgreSQL server program (``initdb``, ``postgres``): on ``PATH`` or where Debian's
    ``postgresql`` package puts it (``/usr/lib/postgresql/<version>/bin``); None when absent."""
    debian = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    return shutil.which(name) or (str(debian[-1]) if debian else None)


@contextlib.contextmanager
def postgres_server(databases: list[str], timeout_s: float = 60.0) -> Iterator[int]:
    """A throw-away PostgreSQL server on 127.0.0.1 and a free port (yielded) with empty
    ``databases``, user ``hir`` (trust authentication on loopback), in its own process group;
    stopped (fast shutdown) and its folder removed on leaving.

    As root it runs as the ``postgres`` user (the server refuses root), in a fresh folder under the
    system temporary folder that user owns. Raises ``RuntimeError`` when the programs are missing
    or the server does not answer within ``timeout_s``.
    """
    import psycopg
    from psycopg import sql

    initdb, server = postgres_binary("initdb"), postgres_binary("postgres")
    if not (initdb and server):
        raise RuntimeError("PostgreSQL is not installed (`make test` installs Debian's postgresql)")
    folder, port = Path(tempfile.mkdtemp(prefix="hir-postgres-")), free_port()
    as_user = []
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    try:
        subprocess.run(as_user + [initdb, "-D", str(folder / "data"), "-U", "hir", "--auth=trust", "--no-sync"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        proc = subprocess.Popen(as_user + [server, "-D", str(folder / "data"), "-h", "127.0.0.1", "-p", str(port),
                                           "-k", str(folder), "-c", "fsync=off"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        def connect() -> "psycopg.Connection":
            return psycopg.connect(host="127.0.0.1", port=port, user="hir", dbname="postgres", autocommit=True)

        try:
            _wait_until(lambda: connect().close() or True, proc, "postgres", timeout_s)
            with connect() as con:
                for name in databases:
                    con.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            yield port
        finally:
            stop_server(proc, signal.SIGINT)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ms = np.asarray(samples) * 1000.0
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


def run(args: argparse.Namespace, settings: Settings) -> dict:
    rng = np.random.default_rng(args.seed)
    batches = [{join_key(t): [f"{t}-{i}" for i in rng.integers(0, args.population, args.entities)] for t in RANKER_TYPES}
               for _ in range(args.lookups)]
    out = {"entities": args.entities, "dim": args.dim}
    with tempfile.TemporaryDirectory(prefix="hir-bench-feast-") as tmp:
        home = Path(tmp)
        settings = settings.replace(data_home=home, online_store="sqlite", online_url="")
        _prepare(settings, args)
        feast = FeastStore.from_settings(settings)
        store = feast.store()
        read, con = _sqlite_reader(feast.online_path, store)
        try:
            out.update(_figures("", feast, store, batches, lambda b: read({t: b[join_key(t)] for t in RANKER_TYPES})))
        finally:
            con.close()
        out["sqlite_direct_p50_ms"], out["sqlite_over_direct"] = out.pop("direct_p50_ms"), out.pop("over_direct")
        out["http_p50_ms"] = _http_p50(home, batches)
        for kind, installed in (("redis", shutil.which("redis-server")), ("postgres", postgres_binary("initdb"))):
            if installed:
                out.update(_server_figures(kind, settings, batches))
            else:
                print(f"bench feast: no {kind} server installed, its figures left out", file=sys.stderr)
    return out


def _prepare(settings: Settings, args: argparse.Namespace) -> None:
    """Random users and ads through the pipeline's path: feature tables, apply, materialise (SQLite)."""
    partition = "2026-01-01"
    write_fake_upstream(settings.artifacts_dir, partition, {t: args.population for t in RANKER_TYPES}, args.dim, args.seed)
    catalogue = Artifacts(settings.artifacts_dir)
    with atomic_dir(catalogue.folder("feature_tables", partition)) as out:
        write_feature_tables(catalogue.embeddings(partition), catalogue.tokens(partition), cutoff_of(partition), out)
    feast = FeastStore.from_settings(settings)
    feast.apply()
    _materialise(feast)
    print(f"bench feast: {args.population} users and ads materialised; timing {args.lookups} lookups", file=sys.stderr)


def _materialise(feast: FeastStore) -> None:
    """The bench's one partition into ``feast``'s online store."""
    feast.materialize(cutoff_of("2026-01-01"), cutoff_of("2026-01-01"), RANKER_TYPES)


def _figures(prefix: str, feast: FeastStore, store, batches: list, direct) -> dict:
    """p50/p99 of hir's read through Feast (``OnlineReader.service``), p50 of Feast's
    ``get_online_features(...).to_dict()`` and of ``direct`` (the store's floor), keys prefixed.
    The three take turns on each batch, so a busy machine slows them alike."""
    reader = feast.reader(store)
    service = store.get_feature_service(RANKER_SERVICE)
    hir, sdk, floor = _timed([
        lambda b: reader.service(RANKER_SERVICE, b),
        lambda b: store.get_online_features(features=service, entity_rows=b, full_feature_names=True).to_dict(),
        direct,
    ], batches)
    p50, p99 = _percentiles(hir)
    direct_p50 = _percentiles(floor)[0]
    return {f"{prefix}p50_ms": round(p50, 3), f"{prefix}p99_ms": round(p99, 3),
            f"{prefix}sdk_p50_ms": round(_percentiles(sdk)[0], 3), f"{prefix}direct_p50_ms": round(direct_p50, 3),
            f"{prefix}over_direct": round(p50 / direct_p50, 2)}


def _http_p50(home: Path, batches: list) -> float:
    """p50 of a POST to ``hir serve``'s ``/get-online-features`` (the SQLite store)."""
    port = free_port()
    proc = start_server(home, port)
    try:
        (http,) = _timed([lambda b: post_online(port, {"feature_service": RANKER_SERVICE, "entities": b,
                                                         "full_feature_names": True})], batches)
    finally:
        stop_server(proc)
    return round(_percentiles(http)[0], 3)


def _server_figures(kind: str, settings: Settings, batches: list) -> dict:
    """The same figures against a Redis or Postgres server started for the bench, stopped after."""
    with contextlib.ExitStack() as stack:
        if kind == "redis":
            port = stack.enter_context(redis_server(settings.data_home))
            url = f"redis://127.0.0.1:{port}"
        else:
            port = stack.enter_context(postgres_server(["feast"]))
            url = f"postgresql://hir@127.0.0.1:{port}/feast?sslmode=disable"
        feast = FeastStore.from_settings(settings.replace(online_store=kind, online_url=url))
        feast.apply()  # creates the store's tables (Postgres)
        _materialise(feast)
        store = feast.store()
        read, con = _redis_reader(port, store) if kind == "redis" else _postgres_reader(port, "feast", store)
        stack.callback(con.close)
        return _figures(f"{kind}_", feast, store, batches, lambda b: read({t: b[join_key(t)] for t in RANKER_TYPES}))


def _timed(fns: list, batches: list) -> list[list[float]]:
    """Seconds per call of each of ``fns`` on each batch, the functions taking turns on a batch,
    after one untimed warm-up call each."""
    for fn in fns:
        fn(batches[0])
    out: list[list[float]] = [[] for _ in fns]
    for batch in batches:
        for fn, samples in zip(fns, out):
            start = time.perf_counter()
            fn(batch)
            samples.append(time.perf_counter() - start)
    return out
