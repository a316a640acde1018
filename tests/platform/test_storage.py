"""hir.storage.Artifacts: the one catalogue of artefact paths, pinned to the on-disk layout data homes hold."""

from __future__ import annotations

from hir.resources import ArtifactStore
from hir.storage import Artifacts

DAY = "2026-01-05"


def test_every_artefact_keeps_its_layout(tmp_path):
    a = Artifacts(tmp_path)
    assert {
        "world_knowledge": a.world_knowledge(),
        "snapshot": a.snapshot_dir(DAY),
        "windows": a.windows_dir(DAY),
        "encoder": a.encoder_dir(DAY),
        "encoder work": a.encoder_work_dir(DAY),
        "embeddings": a.embeddings(DAY),
        "quantizer": a.quantizer_dir(DAY),
        "codes": a.codes(DAY),
        "tokens": a.tokens(DAY),
        "postings": a.postings(DAY),
        "descriptions": a.descriptions(DAY),
        "feature table": a.feature_table(DAY, "user"),
        "results": a.results("baselines", DAY),
    } == {
        "world_knowledge": tmp_path / "world_knowledge" / "_all" / "world_knowledge.parquet",
        "snapshot": tmp_path / "graph_snapshot" / DAY,
        "windows": tmp_path / "eval_windows" / DAY,
        "encoder": tmp_path / "hir_encoder" / DAY,
        "encoder work": tmp_path / "hir_encoder" / f".work-{DAY}",
        "embeddings": tmp_path / "entity_embeddings" / DAY / "embeddings.parquet",
        "quantizer": tmp_path / "bom_quantizer" / DAY,
        "codes": tmp_path / "bom_quantizer" / DAY / "codes.parquet",
        "tokens": tmp_path / "bom_tokens" / DAY / "tokens.parquet",
        "postings": tmp_path / "bom_index" / DAY / "postings.parquet",
        "descriptions": tmp_path / "token_descriptions" / DAY / "descriptions.parquet",
        "feature table": tmp_path / "feature_tables" / DAY / "user.parquet",
        "results": tmp_path / "baselines" / DAY / "results.json",
    }
    assert a.feature_table_glob("user") == str(tmp_path / "feature_tables" / "[0-9]*" / "user.parquet")


def test_partitions_skip_scratch_and_unpartitioned_folders(tmp_path):
    a = Artifacts(tmp_path)
    assert a.partitions("hir_encoder") == [] and a.latest("hir_encoder") is None
    for name in ("2026-01-06", DAY, f".work-{DAY}", ".2026-01-07.tmp-1a2b3c4d", "_all"):
        (tmp_path / "hir_encoder" / name).mkdir(parents=True)
    (tmp_path / "hir_encoder" / "2026-01-09").touch()  # a file, not a partition
    assert a.partitions("hir_encoder") == [DAY, "2026-01-06"]
    assert a.latest("hir_encoder") == "2026-01-06"


def test_feature_table_types_of_one_or_every_partition(tmp_path):
    a = Artifacts(tmp_path)
    for day, types in ((DAY, ("user", "ad")), ("2026-01-06", ("user", "product"))):
        for t in types:
            a.feature_table(day, t).parent.mkdir(parents=True, exist_ok=True)
            a.feature_table(day, t).touch()
    assert a.feature_table_types(DAY) == ["ad", "user"]
    assert a.feature_table_types() == ["ad", "product", "user"]
    assert a.feature_table_types("2026-01-31") == []


def test_the_dagster_resource_delegates_to_the_catalogue(tmp_path):
    store = ArtifactStore(root=str(tmp_path))
    assert store.catalogue.embeddings(DAY) == Artifacts(tmp_path).embeddings(DAY)
    assert store.path("world_knowledge") == tmp_path / "world_knowledge" / "_all"
    with store.write_partition("bom_tokens", DAY) as out:
        (out / "tokens.parquet").write_bytes(b"x")
    assert store.catalogue.tokens(DAY).read_bytes() == b"x"
    assert store.partitions("bom_tokens") == [DAY]


def test_a_killed_writers_scratch_is_swept_by_the_next_write_and_a_live_ones_kept(tmp_path):
    """SIGKILL skips every cleanup: the next write of the same target removes a dead writer's scratch
    folder and file, never a live writer's or another host's (a kill-and-rerun leaves nothing behind)."""
    import os
    import socket
    import subprocess

    from hir.storage import atomic_dir, write_json

    dead = subprocess.Popen(["true"])
    dead.wait()
    target = tmp_path / "2026-01-26"
    host = socket.gethostname()
    stale_dir = tmp_path / f".2026-01-26.tmp-{host}-{dead.pid}-0badc0de"
    stale_old = tmp_path / f".2026-01-26.old-{host}-{dead.pid}-0badc0df"
    live = tmp_path / f".2026-01-26.tmp-{host}-{os.getpid()}-0badc0e0"
    elsewhere = tmp_path / f".2026-01-26.tmp-another-pod-7-{dead.pid}-0badc0e3"  # a pid of another host
    other = tmp_path / f".2026-01-27.tmp-{host}-{dead.pid}-0badc0e1"  # another target's
    for folder in (stale_dir, stale_old, live, elsewhere, other):
        (folder / "part").mkdir(parents=True)
        (folder / "part" / "half.parquet").write_bytes(b"PAR1")
    stale_file = tmp_path / f".meta.json.tmp-{host}-{dead.pid}-0badc0e2"
    stale_file.write_bytes(b"{")
    with atomic_dir(target) as scratch:
        (scratch / "x.json").write_text("{}")
    write_json(tmp_path / "meta.json", {"ok": True})
    assert (target / "x.json").exists()
    assert not stale_dir.exists() and not stale_old.exists() and not stale_file.exists()
    assert live.exists() and elsewhere.exists() and other.exists()
