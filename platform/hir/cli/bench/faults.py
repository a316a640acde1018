"""``hir bench faults``: kill-and-rerun recovery, hostile input and online reads during materialisation.

Three parts, each also used by ``tests/reliability``:

* **Kills.** ``hir run`` on a tiny synthetic ecosystem is killed with SIGKILL while a chosen step
  runs (the step is read from the ``▶ <step>`` progress lines on stderr; the delay after the
  line comes from a seeded RNG), then run again to the end. The outputs are compared with those
  of an uninterrupted run (:func:`outputs`): warehouse tables (content hashes), graph snapshot
  edges, every Parquet file readable, no scratch folders or temporary files left, one row per
  entity in the embeddings, a checkpoint that loads, and a Feast online store with one row per
  entity and feature whose vectors equal the embeddings file.
* **Hostile input.** Every source adapter gets a small valid input with one hostile change
  (:func:`hostile_case`): a field replaced by an SQL-looking string, NUL bytes, a huge field,
  deeply nested JSON, bytes in another encoding, or a whole file of random bytes. A case passes
  when the read is refused with a one-line :class:`~hir.graph.sources.base.SourceError`, or when it
  yields a batch with ``accepted + rejected = read`` that loads into a fresh warehouse with the
  hostile value stored verbatim (as data or as a rejected row's raw text) and every table intact.
* **Generated rows.** Valid rows of every counted file of every adapter, mutated (:func:`mutate_row`:
  wrong types, bad timestamps, unusual Unicode, empty, huge, extra or missing fields, duplicates,
  truncated lines), are appended to a valid input in batches (:func:`fuzz_rows`); every batch must
  read and load with each row counted (read = valid rows + appended rows = accepted + rejected),
  and a refused batch is split until each refused row stands alone.
* **Load.** Clients call ``get_online_features`` in threads while a second partition is
  materialised (:func:`online_load`); every answer must be the old or the new vector of its key.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable

from hir.settings import Settings

# Strings that would do damage if anything spliced them into SQL, a shell or a path.
SQL_LIKE = (
    "'; DROP TABLE events; --",
    "x'); DELETE FROM entities; --",
    "1 OR 1=1",
    "\\'; UPDATE content SET text = NULL; --",
    "$(touch pwned); `id`",
    "../../../../etc/passwd",
)
# Other hostile field values: NUL bytes, a huge field, deeply nested JSON, control and bidi characters.
HOSTILE = SQL_LIKE + (
    "a\x00b",
    "\x00",
    "x" * 200_000,
    "[" * 50_000 + "]" * 50_000,
    '{"a":' * 20_000 + "1" + "}" * 20_000,
    "\u202e\u200b\ufeff😀",
    "\r",
    '"unterminated',
)
# Knobs that make `hir run` on the synthetic ecosystem finish in a few minutes on 2 cores.
SMALL_RUN = {
    "HIR_SYNTHETIC_EVENTS": "20000",
    "HIR_TRAIN_STEPS": "6",
    "HIR_FINETUNE_STEPS": "2",
    "HIR_TRAIN_BATCH": "16",
    "HIR_TRAIN_DIM": "16",
    "HIR_TRAIN_LAYERS": "1",
    "HIR_TRAIN_HEADS": "2",
    "HIR_TRAIN_COARSE": "4",
    "HIR_TRAIN_FINE": "8",
    "HIR_TRAIN_BROAD_TOKENS": "16",
    "HIR_TRAIN_NARROW_TOKENS": "8",
    "HIR_TRAIN_CHECKPOINT_EVERY": "2",
    "HIR_BOM_CODES": "4,8",
    "HIR_BOM_ITERATIONS": "2",
    "HIR_THREADS": "1",
    "HIR_SEED": "0",
}
# Steps of `hir run` worth killing, in the order they run.
KILL_STEPS = ("ingest", "graph_snapshot", "hir_encoder", "entity_embeddings", "feast_online")


# ------------------------------------------------------------------------------------------ kills


def run_env(data_home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a small ``hir run`` into ``data_home`` (``extra`` overrides)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HIR_", "DAGSTER_"))}
    env.update(SMALL_RUN, HIR_DATA_HOME=str(data_home), DAGSTER_DISABLE_TELEMETRY="1", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1", TERM="dumb", COLUMNS="200")
    env.update(extra or {})
    return env


def _hir() -> list[str]:
    return [sys.executable, "-m", "hir.cli.main"]


def run_to_end(data_home: Path, timeout: float, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``hir run`` into ``data_home`` until it exits (raises ``TimeoutExpired`` after ``timeout`` s)."""
    return subprocess.run(_hir() + ["run"], env=run_env(data_home, extra), capture_output=True, text=True, timeout=timeout)


def kill_during(data_home: Path, step: str, delay: float, timeout: float, extra: dict[str, str] | None = None) -> bool:
    """Start ``hir run``; SIGKILL it ``delay`` seconds after its ``▶ step`` line.

    Returns True when the process was killed, False when it exited first (or never reached the
    step within ``timeout`` seconds, in which case it is killed too and False is returned).
    """
    proc = subprocess.Popen(_hir() + ["run"], env=run_env(data_home, extra), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, bufsize=1)
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        for line in proc.stderr:
            if line.strip() == f"▶ {step}":
                time.sleep(delay)
                if proc.poll() is not None:
                    return False
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return True
        proc.wait()
        return False
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def _table_digest(con, sql: str, params: list | None = None) -> list:
    """``[rows, order-independent hash sum]`` of a query's rows (``params`` bind its ``?``)."""
    rows, digest = con.execute(f"SELECT count(*), coalesce(sum(hash(t)), 0) FROM ({sql}) t", params or []).fetchone()
    return [int(rows), str(digest)]


WAREHOUSE_QUERIES = {
    "entities": "SELECT * FROM entities",
    "events": "SELECT * FROM events",
    "relations": "SELECT * FROM relations",
    "content": "SELECT * FROM content",
    "rejected_rows": "SELECT source, location, raw, reason FROM rejected_rows",
    "ingest_ledger": "SELECT source, location, fingerprint, rows_read, rows_accepted, rows_rejected FROM ingest_ledger",
    "planted_truth": "SELECT * FROM planted_truth",
}


def warehouse_digest(warehouse: Path) -> dict[str, list]:
    """Row count and content hash of every warehouse table (times of ingestion left out)."""
    from hir.graph.warehouse import connect

    with connect(warehouse, read_only=True) as con:
        names = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        return {t: _table_digest(con, q) for t, q in WAREHOUSE_QUERIES.items() if t in names}


def parquet_digest(path: Path, columns: list[str] | None = None) -> list:
    """Row count and content hash of a Parquet file (or of ``columns`` of it)."""
    import duckdb

    cols = ", ".join(f'"{c}"' for c in columns) if columns else "*"
    with duckdb.connect() as con:
        return _table_digest(con, f"SELECT {cols} FROM read_parquet(?)", [str(path)])


def leftovers(artifacts: Path) -> list[str]:
    """Scratch folders and temporary files under ``artifacts`` (there should be none after a run)."""
    return sorted(str(p.relative_to(artifacts)) for p in artifacts.rglob("*") if ".tmp-" in p.name or ".old-" in p.name)


def broken_parquet(artifacts: Path) -> list[str]:
    """Parquet files under ``artifacts`` that do not open and read whole."""
    import pyarrow.parquet as pq

    bad = []
    for path in sorted(artifacts.rglob("*.parquet")):
        try:
            pq.read_table(path)
        except Exception as exc:  # any failure to read is the finding
            bad.append(f"{path.relative_to(artifacts)}: {type(exc).__name__}")
    return bad


def checkpoint_loads(artifacts: Path) -> bool:
    """The newest ``hir_encoder`` checkpoint loads (safetensors + JSON, no pickle)."""
    from hir.models.checkpoint import load_model
    from hir.models.graph import load_snapshot
    from hir.storage import Artifacts

    catalogue = Artifacts(artifacts)
    encoder, snapshot = catalogue.latest("hir_encoder"), catalogue.latest("graph_snapshot")
    if encoder is None or snapshot is None:
        return False
    graph = load_snapshot(catalogue.snapshot_dir(snapshot))
    load_model(catalogue.encoder_dir(encoder), num_edge_types=len(graph.edge_types))
    return True


def online_consistency(data_home: Path) -> dict[str, int]:
    """Feast online store against the newest embeddings file.

    ``duplicate_rows``: (entity, feature) pairs stored more than once in any view's table;
    ``missing_or_different``: entities whose online vector is absent or differs from the file;
    ``entities``: entities checked.
    """
    import sqlite3

    import numpy as np
    import pyarrow.parquet as pq

    from hir.serving.feast_store import FeastStore, type_name
    from hir.storage import Artifacts

    feast = FeastStore(data_home=str(data_home))
    catalogue = Artifacts(feast.artifacts_dir)
    table = pq.read_table(catalogue.embeddings(catalogue.latest("entity_embeddings")), columns=["entity_type", "source_key", "embedding"])
    reader = feast.reader()
    with sqlite3.connect(str(feast.online_path)) as con:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        dup = sum(con.execute(f'SELECT count(*) FROM (SELECT 1 FROM "{t}" GROUP BY entity_key, feature_name '
                              "HAVING count(*) > 1)").fetchone()[0] for t in tables)
    frame = table.to_pandas()
    bad = 0
    for raw_type, part in frame.groupby("entity_type"):
        got = feast.online(type_name(raw_type), part["source_key"].tolist(), features=["hir_embedding"], reader=reader)
        bad += sum(g is None or not np.array_equal(np.asarray(g, np.float32), np.asarray(w, np.float32))
                   for g, w in zip(got["hir_embedding"], part["embedding"]))
    return {"duplicate_rows": int(dup), "missing_or_different": int(bad), "entities": len(frame)}


def outputs(data_home: Path) -> dict[str, Any]:
    """Everything a recovered run must reproduce, in comparable form (see :func:`compare`)."""
    import pyarrow.parquet as pq

    from hir.storage import SNAPSHOT_EDGES_FILE, SNAPSHOT_NODES_FILE, Artifacts

    artifacts = data_home / "artifacts"
    catalogue = Artifacts(artifacts)
    snap, emb = catalogue.latest("graph_snapshot"), catalogue.latest("entity_embeddings")
    embeddings = pq.read_table(catalogue.embeddings(emb), columns=["entity_id"]) if emb else None
    return {
        "warehouse": warehouse_digest(data_home / "warehouse.duckdb"),
        "snapshot_nodes": parquet_digest(catalogue.snapshot_dir(snap) / SNAPSHOT_NODES_FILE) if snap else None,
        "snapshot_edges": parquet_digest(catalogue.snapshot_dir(snap) / SNAPSHOT_EDGES_FILE) if snap else None,
        "embedding_keys": parquet_digest(catalogue.embeddings(emb), ["entity_id", "entity_type", "source_key", "cutoff"]) if emb else None,
        "embeddings_exact": parquet_digest(catalogue.embeddings(emb)) if emb else None,
        "embedding_duplicates": (embeddings.num_rows - len(set(embeddings.column(0).to_pylist()))) if emb else None,
        "partitions": {a.name: sorted(p.name for p in a.iterdir()) for a in sorted(artifacts.iterdir()) if a.is_dir()},
        "leftovers": leftovers(artifacts),
        "broken_parquet": broken_parquet(artifacts),
        "checkpoint_loads": checkpoint_loads(artifacts),
        "online": online_consistency(data_home),
    }


# Outputs that must equal the reference exactly; `embeddings_exact` is reported, not required
# (training on a loaded machine may differ in the last bits across processes).
MUST_EQUAL = ("warehouse", "snapshot_nodes", "snapshot_edges", "embedding_keys", "partitions")


def compare(reference: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """What differs between a recovered run's :func:`outputs` and the reference's (empty: equal)."""
    problems = [f"{k}: {got[k]} != {reference[k]}" for k in MUST_EQUAL if got[k] != reference[k]]
    problems += [f"{k}: {got[k]}" for k in ("leftovers", "broken_parquet") if got[k]]
    if got["embedding_duplicates"]:
        problems.append(f"embedding_duplicates: {got['embedding_duplicates']}")
    if not got["checkpoint_loads"]:
        problems.append("checkpoint does not load")
    online = got["online"]
    if online["duplicate_rows"] or online["missing_or_different"] or online["entities"] != reference["online"]["entities"]:
        problems.append(f"online store: {online}")
    return problems


# ----------------------------------------------------------------------------------- hostile input


@dataclass(frozen=True)
class Adapter:
    """A source kind with a builder of a small valid input: ``build(folder) -> path to read``.

    ``row_files``: the delimited files of that input whose every line (after a header) the adapter
    counts as one row read. ``unstored``: ``(file, column)`` pairs the adapter reads and checks but
    does not keep (a hostile value there is accepted and dropped with its column, not stored verbatim).
    """

    kind: str
    build: Callable[[Path], Path]
    row_files: tuple[str, ...]
    unstored: tuple[tuple[str, str], ...] = ()  # (file, column)


def _write(folder: Path, files: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")


def _userbehavior(folder: Path) -> Path:
    _write(folder, {"ub.csv": "1,10,100,pv,1511600000\n1,11,100,cart,1511600100\n2,10,100,buy,1511600200\n"})
    return folder / "ub.csv"


def _taobao_ads(folder: Path) -> Path:
    t0 = 1494201600
    _write(folder, {
        "raw_sample.csv": f"user,time_stamp,adgroup_id,pid,nonclk,clk\n100,{t0},1,430548_1007,1,0\n101,{t0 + 60},2,430548_1007,0,1\n",
        "ad_feature.csv": "adgroup_id,cate_id,campaign_id,customer,brand,price\n1,6406,83237,1,95471,170.0\n2,6406,83237,1,NULL,9.9\n",
        "user_profile.csv": "userid,cms_segid,cms_group_id,final_gender_code,age_level,pvalue_level,shopping_level,"
                            "occupation,new_user_class_level\n100,0,5,2,5,,3,0,3\n",
        "behavior_log.csv": f"user,time_stamp,btag,cate,brand\n100,{t0 - 60},pv,6406,95471\n",
    })
    return folder


def _movielens(folder: Path) -> Path:
    _write(folder, {
        "ratings.csv": "userId,movieId,rating,timestamp\n1,1,4.0,964982703\n1,2,3.5,964982224\n2,1,5.0,964983815\n",
        "tags.csv": "userId,movieId,tag,timestamp\n1,1,funny,1445714994\n",
        "movies.csv": "movieId,title,genres\n1,Toy Story (1995),Adventure|Animation\n2,Jumanji (1995),Adventure\n",
    })
    return folder


def _amazon(folder: Path) -> Path:
    maps = {"id2user": {"1": "U1", "2": "U2"}, "id2item": {"1": "A1", "2": "A2"}, "id2attribute": {"1": "Acme", "2": "Face"}}
    _write(folder, {
        "Toys.txt": "1 1 2\n2 2\n",
        "toys_datamaps.json": json.dumps(maps),
        "Toys_item2attributes.json": json.dumps({"1": [1, 2], "2": [2]}),
        "toys_item_textual_ids.txt": "A1 red lipstick\nA2 face cream\n",
    })
    return folder


MAPPING = """\
events:
  - file: events.csv
    src: {type: user, column: user_id}
    dst: {type: product, column: item_id}
    event_type: {column: action, allowed: [view, buy]}
    ts: {column: time, format: unix_s}
entities:
  - file: items.csv
    type: product
    key: item_id
    text: [title, category]
    attrs: [colour]
relations:
  - file: items.csv
    src: {type: product, column: item_id}
    dst: {type: category, column: category}
    relation: in_category
"""


def _csv(folder: Path) -> Path:
    _write(folder, {
        "events.csv": "user_id,item_id,action,time\nu1,p1,view,1600000000\nu2,p2,buy,1600000100\n",
        "items.csv": "item_id,title,category,colour\np1,Red shoe,shoes,red\np2,Blue hat,hats,blue\n",
        "mapping.yaml": MAPPING,
    })
    return folder


ADAPTERS = {
    "taobao_userbehavior": Adapter("taobao_userbehavior", _userbehavior, ("ub.csv",)),
    "taobao_ads": Adapter("taobao_ads", _taobao_ads, ("ad_feature.csv", "behavior_log.csv", "raw_sample.csv", "user_profile.csv"),
                          unstored=(("raw_sample.csv", "pid"),)),  # the ad slot: no column of the events holds it
    "movielens": Adapter("movielens", _movielens, ("movies.csv", "ratings.csv", "tags.csv")),
    "amazon_seq": Adapter("amazon_seq", _amazon, ("Toys.txt",)),
    "csv": Adapter("csv", _csv, ("events.csv", "items.csv")),
}


@dataclass(frozen=True)
class Mutation:
    """One hostile change to a valid input.

    ``how``: ``"field"`` (replace field ``field`` of line ``line`` of a delimited file by
    ``value``), ``"line"`` (insert ``data`` as a raw line), ``"file"`` (replace the file's bytes by
    ``data``), ``"json"`` (set a string value of a JSON map to ``value``; for ``*.json`` files)
    or ``"yaml"`` (replace a scalar of the CSV mapping by ``value``).
    ``file``: index into the input's files (sorted names, modulo their count).
    """

    how: str
    file: int = 0
    line: int = 0
    field: int = 0
    value: str = ""
    data: bytes = b""


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def _sep(path: Path) -> str:
    return " " if path.suffix == ".txt" else ","


def _mutated_column(folder: Path, m: Mutation) -> str | None:
    """The header name of the column a ``field`` mutation will change in the delimited file
    :func:`apply_mutation` picks under ``folder`` (read before it changes), ``None`` for the header
    line itself or another kind of file."""
    target = _files(folder)[m.file % len(_files(folder))]
    if target.suffix not in (".csv", ".txt"):
        return None
    lines = target.read_text(encoding="utf-8").split("\n")
    i = m.line % max(1, len(lines) - 1)
    header, j = lines[0].split(_sep(target)), m.field % len(lines[i].split(_sep(target)))
    return header[j] if i and j < len(header) else None


def apply_mutation(folder: Path, m: Mutation) -> tuple[Path, bool]:
    """Apply ``m`` to the input files under ``folder``; returns the file chosen and whether it changed."""
    files = _files(folder)
    target = files[m.file % len(files)]
    before = target.read_bytes()
    if m.how == "file":
        target.write_bytes(m.data)
    elif m.how == "line":
        lines = target.read_bytes().split(b"\n")
        lines.insert(m.line % len(lines), m.data)
        target.write_bytes(b"\n".join(lines))
    elif m.how == "json" and target.suffix == ".json":
        target.write_text(json.dumps(_set_json(json.loads(target.read_text()), m)), encoding="utf-8")
    elif m.how == "yaml" and target.suffix == ".yaml":
        words = target.read_text().split(" ")
        i = m.field % len(words)
        words[i] = json.dumps(m.value) + ("\n" if words[i].endswith("\n") else "")
        target.write_text(" ".join(words), encoding="utf-8")
    elif target.suffix in (".csv", ".txt"):
        lines = target.read_text(encoding="utf-8").split("\n")
        i = m.line % max(1, len(lines) - 1)
        fields = lines[i].split(_sep(target))
        fields[m.field % len(fields)] = m.value
        lines[i] = _sep(target).join(fields)
        target.write_text("\n".join(lines), encoding="utf-8", errors="surrogatepass")
    return target, target.read_bytes() != before


def _set_json(obj: Any, m: Mutation) -> Any:
    """Replace one value (chosen by ``m.line``/``m.field``) in a JSON object of maps or lists."""
    keys = sorted(obj) if isinstance(obj, dict) else []
    if not keys:
        return m.value
    key = keys[m.line % len(keys)]
    inner = obj[key]
    if isinstance(inner, dict) and inner:
        sub = sorted(inner)[m.field % len(inner)]
        inner[sub] = m.value
    else:
        obj[key] = m.value
    return obj


@dataclass
class CaseResult:
    """Outcome of one hostile case: ``refused`` (SourceError, with its one-line reason) or ``read``."""

    kind: str
    outcome: str
    reason: str = ""
    rows_read: int = 0
    rows_accepted: int = 0
    rows_rejected: int = 0
    verbatim: bool = True


def hostile_case(kind: str, workdir: Path, m: Mutation, load: bool = True) -> CaseResult:
    """Build the adapter's valid input in ``workdir``, apply ``m``, read it (and load it).

    A refusal must be a one-line :class:`SourceError`; a read must satisfy ``accepted + rejected
    = read``, load into a fresh warehouse in ``workdir`` and (for an SQL-looking value) hold the
    value verbatim in some text column, with every canonical table intact. Anything else raises.
    """
    from hir.errors import SourceError
    from hir.graph.sources import read_source
    from hir.settings import Settings

    path = ADAPTERS[kind].build(workdir / "input")
    column = _mutated_column(workdir / "input", m)
    target, changed = apply_mutation(workdir / "input", m)
    # Where an SQL-looking value must come out verbatim: a field of a CSV file (but a column the
    # adapter does not keep), a value of the datamaps.
    kept_field = m.how == "field" and target.suffix == ".csv" and (target.name, column) not in ADAPTERS[kind].unstored
    expect_verbatim = changed and m.value in SQL_LIKE and (kept_field or (m.how == "json" and "datamaps" in target.name))
    settings = Settings.from_mapping({"HIR_DATA_HOME": str(workdir / "home")})
    try:
        batch = read_source(kind, path, settings)
    except SourceError as exc:
        reason = str(exc)
        if not reason.strip() or "\n" in reason.strip():
            raise AssertionError(f"{kind}: refusal is not one line: {reason!r}") from exc
        return CaseResult(kind, "refused", reason=reason)
    batch.check_accounting()
    result = CaseResult(kind, "read", rows_read=batch.rows_read, rows_accepted=batch.rows_accepted,
                        rows_rejected=batch.rows_rejected)
    if load:
        result.verbatim = _load_and_check(batch, workdir / "home" / "warehouse.duckdb", m.value if expect_verbatim else None)
    return result


_TEXT_COLUMNS = """
SELECT source_key AS v FROM entities UNION ALL SELECT CAST(attrs AS VARCHAR) FROM entities
UNION ALL SELECT text FROM content UNION ALL SELECT image_uri FROM content
UNION ALL SELECT raw FROM rejected_rows UNION ALL SELECT reason FROM rejected_rows
UNION ALL SELECT event_type FROM events UNION ALL SELECT relation FROM relations
"""


def _load_and_check(batch, warehouse: Path, value: str | None) -> bool:
    """Load ``batch``; check counts and that every table survived; True when ``value`` (if any) is
    stored verbatim in some text column (plain, or JSON-escaped inside ``attrs``)."""
    from hir.graph.warehouse import CANONICAL_TABLES, connect, load_batch, table_counts

    with connect(warehouse) as con:
        report = load_batch(con, batch)
        counts = table_counts(con)
        if counts["rejected_rows"] != batch.rows_rejected or counts["events"] != report.new_events:
            raise AssertionError(f"{batch.source}: warehouse counts {counts} disagree with the batch {report}")
        names = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        if not set(CANONICAL_TABLES) <= names:
            raise AssertionError(f"{batch.source}: tables lost: {set(CANONICAL_TABLES) - names}")
        if value is None:
            return True
        hits = con.execute(f"SELECT count(*) FROM ({_TEXT_COLUMNS}) WHERE contains(lower(v), lower(?)) OR contains(lower(v), lower(?))",
                           [value, json.dumps(value)[1:-1]]).fetchone()[0]
    return hits > 0


def random_mutation(rng: random.Random) -> Mutation:
    """A hostile mutation drawn from ``rng`` (the benchmark's cases; the tests use hypothesis)."""
    how = rng.choice(("field", "field", "field", "line", "file", "json", "yaml"))
    value = rng.choice(HOSTILE)
    raw = rng.choice((value.encode("utf-8", "surrogatepass"), value.encode("utf-16"), "é,ü,ß".encode("latin-1"),
                      bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 400)))))
    return Mutation(how, file=rng.randrange(8), line=rng.randrange(8), field=rng.randrange(12), value=value, data=raw)


def fuzz(cases: int, seed: int, workdir: Path) -> dict[str, int]:
    """Run ``cases`` random hostile cases over all adapters; returns outcome counts and crashes."""
    rng = random.Random(seed)
    stats = {"fuzz_cases": 0, "refused": 0, "read": 0, "crashes": 0, "not_verbatim": 0, "rows_lost": 0}
    for n in range(cases):
        kind = sorted(ADAPTERS)[n % len(ADAPTERS)]
        m = random_mutation(rng)
        case_dir = Path(tempfile.mkdtemp(prefix=f"case{n}-", dir=workdir))
        stats["fuzz_cases"] += 1
        try:
            result = hostile_case(kind, case_dir, m)
        except Exception as exc:  # a crash is what this benchmark counts
            stats["crashes"] += 1
            print(f"crash: {kind} {m.how} {m.value[:40]!r}: {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
            continue
        stats[result.outcome] += 1
        stats["not_verbatim"] += not result.verbatim
        stats["rows_lost"] += result.rows_read - result.rows_accepted - result.rows_rejected
    return stats


# ---------------------------------------------------------------------------------- generated rows

# Values a mutated field takes: of the wrong type, impossible times, unusual text, very long.
WRONG_TYPES = ("abc", "1.5", "-1", "NaN", "inf", "-inf", "1e309", "0x1F", "true", " 7 ", "١٢٣", "NULL", "None",
               "9223372036854775808", "-9223372036854775809", "1_000", "+3", "00012")
BAD_TIMES = ("-1", "0", "99999999999999999999", "1e20", "2024-13-45T25:61:00", "1511600000.999999", "nan",
             "4102444800", "-62135596800", "1970-01-01", "253402300800")
UNICODE = ("😀", "\u202e", "\u200b", "\ufeff", "é", "ß", "中文", "e\u0301", "\x00", "\x1b[31m", "\u2028", "\U0010ffff", "Ω≈ç√")
_TIMESTAMP = re.compile(r"\d{9,10}(\.\d+)?")


def _field(fields: list[str], rng: random.Random, prefer: re.Pattern | None = None) -> int:
    """A random field index, among those matching ``prefer`` when any does."""
    matching = [i for i, f in enumerate(fields) if prefer and prefer.fullmatch(f)]
    return rng.choice(matching) if matching else rng.randrange(len(fields))


def _set(fields: list[str], i: int, value: str) -> list[str]:
    return fields[:i] + [value] + fields[i + 1:]


# Each takes the fields of a valid row and the RNG and returns the mutated fields.
ROW_MUTATORS: dict[str, Callable[[list[str], random.Random], list[str]]] = {
    "wrong_type": lambda f, r: _set(f, _field(f, r), r.choice(WRONG_TYPES)),
    "bad_timestamp": lambda f, r: _set(f, _field(f, r, _TIMESTAMP), r.choice(BAD_TIMES)),
    "empty_field": lambda f, r: _set(f, _field(f, r), ""),
    "all_empty": lambda f, r: [""] * len(f),
    "unicode": lambda f, r: (lambda i: _set(f, i, r.choice(("", f[i])) + r.choice(UNICODE)))(_field(f, r)),
    "huge": lambda f, r: _set(f, _field(f, r), r.choice("9x") * r.randint(1_000, 100_000)),
    "hostile": lambda f, r: _set(f, _field(f, r), r.choice(HOSTILE)),
    "padded": lambda f, r: (lambda i: _set(f, i, r.choice((" ", "\t")) + f[i] + " "))(_field(f, r)),
    "extra_field": lambda f, r: f + [r.choice(WRONG_TYPES)],
    "missing_field": lambda f, r: f[:-1],
    "duplicate": lambda f, r: f,
}


def mutate_row(line: str, sep: str, rng: random.Random) -> str:
    """``line`` (a valid row) after one to three mutations from :data:`ROW_MUTATORS`, or cut short.

    Quotes and line breaks become other characters, so the result stays one physical line (the
    whole-input cases of :func:`fuzz` cover those).
    """
    fields = line.split(sep)
    for name in rng.sample(sorted(ROW_MUTATORS), rng.randint(1, 3)):
        fields = ROW_MUTATORS[name](fields, rng) or [""]
    row = sep.join(fields)
    if rng.random() < 0.1:  # a truncated line
        row = row[: rng.randrange(len(row) + 1)]
    return row.replace('"', "'").replace("\r", " ").replace("\n", " ")


def _row_batch(kind: str, name: str, rows: list[str], workdir: Path, base_rows: int) -> dict[str, int]:
    """Read the adapter's valid input with ``rows`` appended to its file ``name``, then load it.

    A refused read (one-line :class:`SourceError`) is split in halves until each refused row is
    alone. Returns ``read``/``refused`` row counts and ``rows_lost``: rows neither counted as read
    nor refused (``base_rows`` + appended rows − rows read). Anything else raises.
    """
    from hir.errors import SourceError
    from hir.graph.sources import read_source
    from hir.settings import Settings

    folder = Path(tempfile.mkdtemp(prefix=f"{kind}-", dir=workdir))
    path = ADAPTERS[kind].build(folder / "input")
    with open(folder / "input" / name, "a", encoding="utf-8") as handle:
        handle.write("".join(row + "\n" for row in rows))
    try:
        batch = read_source(kind, path, Settings.from_mapping({"HIR_DATA_HOME": str(folder / "home")}))
    except SourceError as exc:
        if "\n" in str(exc).strip() or not str(exc).strip():
            raise AssertionError(f"{kind}: refusal is not one line: {exc!r}") from exc
        if len(rows) == 1:
            return {"read": 0, "refused": 1, "rows_lost": 0}
        halves = [_row_batch(kind, name, part, workdir, base_rows) for part in (rows[: len(rows) // 2], rows[len(rows) // 2:])]
        return {key: sum(h[key] for h in halves) for key in halves[0]}
    batch.check_accounting()
    _load_and_check(batch, folder / "home" / "warehouse.duckdb", None)
    return {"read": len(rows), "refused": 0, "rows_lost": abs(base_rows + len(rows) - batch.rows_read)}


def fuzz_rows(cases: int, seed: int, workdir: Path, batch_rows: int = 50) -> dict[str, int]:
    """``cases`` generated rows (:func:`mutate_row` of the valid rows of every counted file of every
    adapter), appended ``batch_rows`` at a time to one file of a valid input, read and loaded.

    Returns ``row_cases``, ``row_batches``, ``read``/``refused`` rows, ``crashes`` (batches that
    raised anything but a one-line refusal) and ``rows_lost``.
    """
    from hir.graph.sources import read_source
    from hir.settings import Settings

    rng = random.Random(seed)
    targets = [(kind, name) for kind in sorted(ADAPTERS) for name in ADAPTERS[kind].row_files]
    valid, base_rows = {}, {}
    for kind in sorted(ADAPTERS):
        folder = Path(tempfile.mkdtemp(prefix=f"valid-{kind}-", dir=workdir))
        path = ADAPTERS[kind].build(folder / "input")
        base_rows[kind] = read_source(kind, path, Settings.from_mapping({"HIR_DATA_HOME": str(folder)})).rows_read
        for name in ADAPTERS[kind].row_files:
            valid[kind, name] = (folder / "input" / name).read_text(encoding="utf-8").splitlines()
    stats = {"row_cases": 0, "row_batches": 0, "read": 0, "refused": 0, "crashes": 0, "rows_lost": 0}
    for n, start in enumerate(range(0, cases, batch_rows)):
        kind, name = targets[n % len(targets)]
        sep = _sep(Path(name))
        rows = [mutate_row(rng.choice(valid[kind, name]), sep, rng) for _ in range(min(batch_rows, cases - start))]
        stats["row_cases"] += len(rows)
        stats["row_batches"] += 1
        try:
            outcome = _row_batch(kind, name, rows, workdir, base_rows[kind])
        except Exception as exc:  # a crash is what this benchmark counts
            stats["crashes"] += 1
            print(f"crash: {kind} {name} rows: {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
            continue
        for key, value in outcome.items():
            stats[key] += value
    return stats


# ------------------------------------------------------------------------------------------- load


def _feature_embeddings(n: int, dim: int, cutoff: datetime, version: str, seed: int):
    """A tiny ``entity_embeddings`` table: ``n`` users and ``n`` ads with random unit vectors."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((2 * n, dim)).astype(np.float32)
    types = ["user"] * n + ["ad"] * n
    keys = [f"u{i}" for i in range(n)] + [f"a{i}" if i else "'; DROP TABLE events; --" for i in range(n)]
    return pa.table({
        "entity_id": pa.array(np.arange(2 * n), pa.int64()),
        "entity_type": types, "source_key": keys,
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), dim),
        "coarse_prototype": pa.array(np.zeros(2 * n, np.int32)), "fine_prototype": pa.array(np.zeros(2 * n, np.int32)),
        "model_version": [version] * (2 * n),
        "cutoff": pa.array([cutoff] * (2 * n), pa.timestamp("us", tz="UTC")),
    })


def prepare_two_partitions(feast: "FeastStore", n: int = 200, dim: int = 16) -> dict[str, Any]:  # noqa: F821
    """Two partitions of feature tables in ``feast``'s data home; the first applied and materialised.

    Returns ``{"feast", "keys": {type: [key]}, "old"/"new": {(type, key): vector}, "end"}``.
    """
    from hir.partitions import cutoff_of
    from hir.serving.feast_store import write_feature_tables
    from hir.storage import Artifacts, write_parquet

    data_home = Path(feast.data_home)
    days, vectors = ("2026-01-10", "2026-01-11"), []
    for i, day in enumerate(days):
        table = _feature_embeddings(n, dim, cutoff_of(day), f"v{i}", seed=i)
        src = data_home / "scratch" / day / "embeddings.parquet"
        write_parquet(src, table)
        out = Artifacts(feast.artifacts_dir).folder("feature_tables", day)
        out.mkdir(parents=True, exist_ok=True)
        write_feature_tables(src, None, cutoff_of(day), out)
        frame = table.to_pandas()
        vectors.append({(t, k): list(v) for t, k, v in zip(frame["entity_type"], frame["source_key"], frame["embedding"])})
    store = feast.store()
    feast.apply(store)
    feast.materialize(cutoff_of(days[0]) - timedelta(seconds=1), cutoff_of(days[0]), ["user", "ad"], store)
    keys = {t: sorted({k for (tt, k) in vectors[0] if tt == t}) for t in ("user", "ad")}
    return {"feast": feast, "keys": keys, "old": vectors[0], "new": vectors[1], "end": cutoff_of(days[1])}


def online_load(feast: "FeastStore", clients: int = 8, seconds: float = 10.0, seed: int = 0) -> dict[str, int]:  # noqa: F821
    """``clients`` threads read online features of ``feast`` (any online store) while the second
    partition is materialised.

    Each client reads random batches of 20 keys of one type until ``seconds`` have passed and
    the materialisation has finished. Returns ``lookups``, ``lookup_errors`` (exceptions),
    ``mixed_answers`` (a vector that is neither the key's old nor its new one) and ``new_seen``.
    """
    import numpy as np

    setup = prepare_two_partitions(feast)
    keys = setup["keys"]
    stats = {"lookups": 0, "lookup_errors": 0, "mixed_answers": 0, "new_seen": 0}
    lock, done = threading.Lock(), threading.Event()
    errors: list[str] = []

    def client(idx: int) -> None:
        rng = random.Random(seed * 1000 + idx)
        reader = feast.reader()
        deadline = time.monotonic() + seconds
        finished = False
        while not finished:  # the last read starts after the materialisation has ended
            finished = done.is_set() and time.monotonic() >= deadline
            t = rng.choice(("user", "ad"))
            batch = rng.sample(keys[t], 20)
            try:
                answer = feast.online(t, batch, features=["hir_embedding", "model_version"], reader=reader)
            except Exception as exc:  # every failed lookup is counted and reported
                with lock:
                    stats["lookup_errors"] += 1
                    errors.append(f"{type(exc).__name__}: {exc}")
                continue
            mixed = new = 0
            for k, v, version in zip(batch, answer["hir_embedding"], answer["model_version"]):
                old_v, new_v = setup["old"][(t, k)], setup["new"][(t, k)]
                # a whole answer is old (vector and version v0) or new (v1), never a mix of the two
                is_new = v is not None and version == "v1" and np.array_equal(np.asarray(v, np.float32), np.asarray(new_v, np.float32))
                is_old = v is not None and version == "v0" and np.array_equal(np.asarray(v, np.float32), np.asarray(old_v, np.float32))
                mixed += not (is_new or is_old)
                new += is_new
            with lock:
                stats["lookups"] += len(batch)
                stats["mixed_answers"] += mixed
                stats["new_seen"] += new

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for th in threads:
        th.start()
    try:
        time.sleep(min(1.0, seconds / 4))
        feast.materialize(setup["end"] - timedelta(seconds=1), setup["end"], ["user", "ad"])
    finally:
        done.set()
        for th in threads:
            th.join()
    if errors:
        print(f"lookup errors, first: {errors[0][:300]}", file=sys.stderr)
    return stats


# -------------------------------------------------------------------------------------- benchmark


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", default=",".join(KILL_STEPS),
                        help="steps to kill in, one kill each, in this order (comma-separated; empty: no kills)")
    parser.add_argument("--fuzz-cases", type=int, default=200, help="hostile whole-input cases over all adapters")
    parser.add_argument("--row-cases", type=int, default=1000, help="generated hostile rows over every adapter's files")
    parser.add_argument("--clients", type=int, default=8, help="concurrent online readers")
    parser.add_argument("--seconds", type=float, default=10.0, help="duration of the online read load")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run-timeout", type=float, default=900.0, help="seconds one `hir run` may take")


def kill_sequence(home: Path, steps: list[str], rng: random.Random, timeout: float,
                  extra: dict[str, str] | None = None) -> dict[str, Any]:
    """Kill ``hir run`` in ``home`` once per step of ``steps`` (each run resumes what the previous
    kill interrupted), then run it to the end (``extra``: settings over :func:`run_env`'s). Returns
    ``kills`` and the final run's ``returncode`` and last ``stderr`` line."""
    killed = sum(kill_during(home, step, rng.uniform(0.2, 3.0), timeout, extra) for step in steps)
    final = run_to_end(home, timeout, extra)
    last = (final.stderr.strip().splitlines() or [""])[-1]
    return {"kills": killed, "returncode": final.returncode, "last_line": last}


def kills(steps: list[str], seed: int, workdir: Path, timeout: float) -> dict[str, Any]:
    """An uninterrupted reference run, then one data home killed once in each of ``steps`` (random
    delays from ``seed``) and run to the end; its outputs are compared with the reference's."""
    ref_home = workdir / "reference"
    ref = run_to_end(ref_home, timeout)
    if ref.returncode != 0:
        raise RuntimeError(f"reference run failed: {ref.stderr[-500:]}")
    reference = outputs(ref_home)
    seq = kill_sequence(workdir / "killed", steps, random.Random(seed), timeout)
    stats = {"kills": seq["kills"], "recovered": 0, "outputs_equal": False, "embeddings_bit_equal": False, "differences": []}
    if seq["returncode"] != 0:
        stats["differences"].append(f"final run failed: {seq['last_line']}")
        return stats
    got = outputs(workdir / "killed")
    problems = compare(reference, got)
    stats.update(recovered=seq["kills"], outputs_equal=not problems,
                 embeddings_bit_equal=got["embeddings_exact"] == reference["embeddings_exact"], differences=problems)
    return stats


def run(args: argparse.Namespace, settings: Settings) -> dict[str, Any]:
    from hir.errors import SettingsError
    from hir.serving.feast_store import FeastStore

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hir-faults-") as tmp:
        work = Path(tmp)
        steps = [step.strip() for step in args.steps.split(",") if step.strip()]
        unknown = sorted(set(steps) - set(KILL_STEPS))
        if unknown:
            raise SettingsError(f"--steps: unknown steps {', '.join(unknown)}; choose from {', '.join(KILL_STEPS)}")
        killed = kills(steps, args.seed, work / "kills", args.run_timeout) if steps else {
            "kills": 0, "recovered": 0, "outputs_equal": None, "embeddings_bit_equal": None, "differences": []}
        (work / "fuzz").mkdir()
        fuzzed = fuzz(args.fuzz_cases, args.seed, work / "fuzz")
        rows = fuzz_rows(args.row_cases, args.seed, work / "fuzz")
        (work / "load").mkdir()
        load = online_load(FeastStore(data_home=str(work / "load")), args.clients, args.seconds, args.seed)
    return {
        "kills": killed["kills"], "recovered": killed["recovered"], "outputs_equal": killed["outputs_equal"],
        "embeddings_bit_equal": killed["embeddings_bit_equal"],
        "fuzz_cases": fuzzed["fuzz_cases"] + rows["row_cases"], "input_cases": fuzzed["fuzz_cases"],
        "row_cases": rows["row_cases"], "row_batches": rows["row_batches"],
        "refused": fuzzed["refused"] + rows["refused"], "read": fuzzed["read"] + rows["read"],
        "not_verbatim": fuzzed["not_verbatim"], "crashes": fuzzed["crashes"] + rows["crashes"],
        "rows_lost": fuzzed["rows_lost"] + rows["rows_lost"],
        "lookups": load["lookups"], "lookup_errors": load["lookup_errors"], "mixed_answers": load["mixed_answers"],
        "new_seen": load["new_seen"], "differences": killed["differences"][:5],
        "seconds": round(time.perf_counter() - started, 1),
    }
