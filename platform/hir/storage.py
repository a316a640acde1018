"""Where artefacts live (:class:`Artifacts`) and how they are written: atomically.

Every artefact is written to a temporary name beside its target, then renamed. A reader never
sees a half-written file, and a process killed mid-write leaves the previous version in place.
Partition folders are replaced whole: the new folder is built aside and swapped in, so
re-materialising a partition replaces exactly that partition's files. A scratch name holds its
writer's host and process id (``.<name>.tmp-<host>-<pid>-<hex>``): what a killed writer of this
host left beside a target is removed by the next write of that target (:func:`_sweep_dead`), while
a live writer's, or another host's (a pod on a shared volume), is kept.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import socket
import uuid
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from hir.errors import StorageError

UNPARTITIONED = "_all"  # the partition folder of an asset without partitions (world_knowledge)

# The files of an asset's partition folder that other modules read. A writer builds the folder
# aside (``ArtifactStore.write_partition``) and names its files with these; a reader asks
# :class:`Artifacts` for the finished path.
WORLD_KNOWLEDGE_FILE = "world_knowledge.parquet"
META_FILE = "meta.json"  # world_knowledge, graph_snapshot and eval_windows
SNAPSHOT_NODES_FILE = "nodes.parquet"
SNAPSHOT_EDGES_FILE = "edges.parquet"
WINDOWS_FILE = "windows.parquet"
EMBEDDINGS_FILE = "embeddings.parquet"
SERVING_EMBEDDINGS_FILE = "serving_embeddings.parquet"  # as of a later serving time (hir.evaluation.fresh)
CODES_FILE = "codes.parquet"
QUANTIZER_REPORT_FILE = "report.json"
TOKENS_FILE = "tokens.parquet"
POSTINGS_FILE = "postings.parquet"
DESCRIPTIONS_FILE = "descriptions.parquet"
DESCRIPTIONS_PREVIEW_FILE = "descriptions.md"
FEATURE_TABLE_FILE = "{entity_type}.parquet"  # one per entity type in a feature_tables partition
RESULTS_FILE = "results.json"  # baselines, retrieval_eval, ranker_eval and token_quality
PER_QUERY_FILE = "per_query.parquet"  # baselines: each baseline's figures on each test query (retrieval_eval pairs hir with them)


class Artifacts:
    """The catalogue of artefact paths: ``<root>/<asset>/<partition>/<file>``, nowhere else spelled out.

    ``root`` is the data home's ``artifacts`` folder. The layout is what data homes already hold,
    so changing a name here moves existing data out of reach. Paths are returned whether or not
    the file exists yet.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def folder(self, asset: str, partition: str | None = None) -> Path:
        """The folder of one partition of ``asset`` (``_all`` when the asset has no partitions)."""
        return self.root / asset / (partition or UNPARTITIONED)

    def partitions(self, asset: str) -> list[str]:
        """Partitions of ``asset`` written so far, oldest first (scratch and ``_all`` folders left out)."""
        base = self.root / asset
        if not base.exists():
            return []
        return sorted(p.name for p in base.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))

    def latest(self, asset: str) -> str | None:
        """The newest written partition of ``asset``, or None."""
        written = self.partitions(asset)
        return written[-1] if written else None

    def world_knowledge(self) -> Path:
        return self.folder("world_knowledge") / WORLD_KNOWLEDGE_FILE

    def snapshot_dir(self, partition: str) -> Path:
        return self.folder("graph_snapshot", partition)

    def windows_dir(self, partition: str) -> Path:
        return self.folder("eval_windows", partition)

    def encoder_dir(self, partition: str) -> Path:
        """The published checkpoint of ``partition``'s encoder (files named by ``hir.models.checkpoint``)."""
        return self.folder("hir_encoder", partition)

    def encoder_work_dir(self, partition: str) -> Path:
        """Where ``partition``'s training run checkpoints and resumes before the asset publishes it."""
        return self.folder("hir_encoder", f".work-{partition}")

    def embeddings(self, partition: str) -> Path:
        return self.folder("entity_embeddings", partition) / EMBEDDINGS_FILE

    def serving_embeddings(self, partition: str) -> Path:
        """The partition's encoder's embeddings as of a later serving time (beside its own)."""
        return self.folder("entity_embeddings", partition) / SERVING_EMBEDDINGS_FILE

    def quantizer_dir(self, partition: str) -> Path:
        return self.folder("bom_quantizer", partition)

    def codes(self, partition: str) -> Path:
        return self.quantizer_dir(partition) / CODES_FILE

    def tokens(self, partition: str) -> Path:
        return self.folder("bom_tokens", partition) / TOKENS_FILE

    def postings(self, partition: str) -> Path:
        return self.folder("bom_index", partition) / POSTINGS_FILE

    def descriptions(self, partition: str) -> Path:
        return self.folder("token_descriptions", partition) / DESCRIPTIONS_FILE

    def feature_table(self, partition: str, entity_type: str) -> Path:
        return self.folder("feature_tables", partition) / FEATURE_TABLE_FILE.format(entity_type=entity_type)

    def feature_table_glob(self, entity_type: str) -> str:
        """Every partition's table of ``entity_type`` as one glob (a Feast file source), no scratch folders."""
        return str(self.feature_table("[0-9]*", entity_type))

    def feature_table_types(self, partition: str | None = None) -> list[str]:
        """Entity types with a feature table in ``partition`` (or in any partition), sorted."""
        folders = [self.folder("feature_tables", p) for p in ([partition] if partition else self.partitions("feature_tables"))]
        return sorted({f.stem for d in folders if d.is_dir() for f in d.glob(FEATURE_TABLE_FILE.format(entity_type="*"))})

    def results(self, asset: str, partition: str) -> Path:
        """The ``results.json`` of an evaluation asset (``baselines``, ``retrieval_eval``, …)."""
        return self.folder(asset, partition) / RESULTS_FILE


def _tmp_sibling(path: Path, kind: str = "tmp") -> Path:
    return path.with_name(f".{path.name}.{kind}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _sweep_dead(path: Path) -> None:
    """Remove the scratch siblings of ``path`` whose writer is dead (a SIGKILL skips every cleanup)."""
    host = socket.gethostname()
    for sibling in path.parent.glob(f".{glob.escape(path.name)}.*-*-*-*"):
        kind, _, rest = sibling.name[len(path.name) + 2:].partition("-")
        writer, pid, _ = rest.rsplit("-", 2)
        if kind in ("tmp", "old") and writer == host and pid.isdigit() and not _alive(int(pid)):
            if sibling.is_dir():
                shutil.rmtree(sibling, ignore_errors=True)
            else:
                sibling.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path; on success it is fsynced and renamed onto ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _sweep_dead(path)
    tmp = _tmp_sibling(path)
    try:
        yield tmp
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StorageError(exc.errno, f"could not write {path}: {exc.strerror or exc}") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_bytes(path: str | Path, data: bytes) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_json(path: str | Path, obj: Any) -> Path:
    return write_bytes(path, json.dumps(obj, indent=2, sort_keys=True, default=str).encode())


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text())


def write_parquet(path: str | Path, table: pa.Table | Any) -> Path:
    """Write a pyarrow Table (or a pandas DataFrame) to Parquet atomically."""
    if not isinstance(table, pa.Table):
        table = pa.Table.from_pandas(table, preserve_index=False)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")
    return Path(path)


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Build a folder aside and swap it in for ``path`` on success (the old one is removed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _sweep_dead(path)
    tmp = _tmp_sibling(path)
    tmp.mkdir()
    try:
        yield tmp
        old = None
        if path.exists():
            old = _tmp_sibling(path, "old")
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise StorageError(exc.errno, f"could not write {path}: {exc.strerror or exc}") from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
