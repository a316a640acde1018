"""A full disk or a read-only data home: a clear one-line error, earlier outputs intact, no leftovers."""

import errno
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hir import storage
from hir.cli import main as cli
from hir.errors import StorageError
from hir.resources import ArtifactStore
from hir.storage import write_parquet


def _fail_replace(monkeypatch, code):
    def replace(src, dst):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(storage.os, "replace", replace)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_failed_file_write_keeps_the_old_file(tmp_path, monkeypatch, code):
    path = write_parquet(tmp_path / "a" / "t.parquet", pa.table({"x": [1, 2, 3]}))
    _fail_replace(monkeypatch, code)
    with pytest.raises(StorageError, match=f"could not write {path}") as err:
        write_parquet(path, pa.table({"x": [9]}))
    assert err.value.errno == code
    assert pq.read_table(path).column("x").to_pylist() == [1, 2, 3]
    assert [p.name for p in path.parent.iterdir()] == ["t.parquet"]


def test_failed_partition_swap_keeps_the_old_partition(tmp_path, monkeypatch):
    store = ArtifactStore(root=str(tmp_path))
    with store.write_partition("graph_snapshot", "2026-01-01") as out:
        write_parquet(out / "edges.parquet", pa.table({"src": [1]}))
    _fail_replace(monkeypatch, errno.ENOSPC)
    with pytest.raises(StorageError):
        with store.write_partition("graph_snapshot", "2026-01-01") as out:
            (out / "edges.parquet").write_bytes(b"half")
    folder = store.path("graph_snapshot", "2026-01-01")
    assert pq.read_table(folder / "edges.parquet").column("src").to_pylist() == [1]
    assert sorted(p.name for p in folder.parent.iterdir()) == ["2026-01-01"]


def test_cli_on_a_full_data_home_prints_one_line(data_home, monkeypatch, capsys):
    earlier = write_parquet(data_home / "artifacts" / "world_knowledge" / "_all" / "world_knowledge.parquet",
                            pa.table({"entity_id": [7]}))
    _fail_replace(monkeypatch, errno.ENOSPC)
    code = cli.main(["run", "--ingest-only", "--data-home", str(data_home)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("hir run: ") and "No space left on device" in err[0]
    assert pq.read_table(earlier).column("entity_id").to_pylist() == [7]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through chmod; the monkeypatched tests cover it")
def test_read_only_data_home_is_one_line(data_home, capsys):
    earlier = write_parquet(data_home / "artifacts" / "x" / "_all" / "t.parquet", pa.table({"x": [1]}))
    for folder in (data_home, data_home / "dagster"):
        folder.chmod(0o555)
    try:
        code = cli.main(["run", "--ingest-only", "--data-home", str(data_home)])
    finally:
        for folder in (data_home, data_home / "dagster"):
            folder.chmod(0o755)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert pq.read_table(earlier).column("x").to_pylist() == [1]


def test_warehouse_io_failure_during_ingest_is_one_line(data_home, monkeypatch, capsys):
    import duckdb
    from hir.graph import warehouse

    def full_disk(*args, **kwargs):
        raise duckdb.IOException("IO Error: Could not write file: No space left on device")

    monkeypatch.setenv("HIR_SYNTHETIC_EVENTS", "2000")
    monkeypatch.setattr(warehouse.duckdb, "connect", full_disk)
    code = cli.main(["run", "--ingest-only", "--data-home", str(data_home)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("hir run: ") and "No space left on device" in err[-1] and "warehouse" in err[-1]
    assert not any(line.startswith("Traceback") for line in err)
