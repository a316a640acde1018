"""Fresh serving-time embeddings (DESIGN §7, §10): the partition's encoder applied, without
retraining, to the graph as of the moment a window is scored.

A split's test queries carry a history (what every baseline scores from); on the published
leave-last-out protocol it runs up to the test window's start ``T + val_days`` (each user's
second-to-last item, dated in the validation day, is in it), on the temporal protocol up to the
cut-off ``T``. :func:`serving_time` gives that time ``s``; :func:`serving_embeddings` builds the
snapshot as of ``s`` (the edge state of the partition's snapshot advanced by the events in
``[T, s)``), loads the partition's student and embeds every entity of that snapshot from its
neighbourhood as of ``s`` (:func:`hir.models.inference.embed_all`). An entity first seen in
``[T, s)`` gets its inductive embedding from its hashed id, world knowledge and edges. At ``s = T``
the partition's own ``entity_embeddings`` already are the serving embeddings
(:func:`scoring_embeddings` picks the file).

The result is cached beside the partition's entity embeddings (``Artifacts.serving_embeddings``)
and rebuilt when the encoder checkpoint is newer than the cache.
"""

from __future__ import annotations

import json
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

from hir.evaluation.protocols import Split
from hir.settings import Settings
from hir.storage import META_FILE, Artifacts


def scoring_embeddings(split: Split, artifacts: Artifacts, partition: str, settings: Settings) -> Path:
    """The embeddings file that scores ``split``'s test window: the serving embeddings as of
    :func:`serving_time`, or the partition's own when that is its cut-off (or it has no snapshot)."""
    meta_path = artifacts.snapshot_dir(partition) / META_FILE
    if not meta_path.exists():
        return artifacts.embeddings(partition)
    cutoff = datetime.fromtimestamp(float(json.loads(meta_path.read_text(encoding="utf-8"))["cutoff"]), tz=timezone.utc)
    at = serving_time(split, cutoff, settings)
    if at <= cutoff:
        return artifacts.embeddings(partition)
    return serving_embeddings(settings, artifacts, partition, at)


def serving_time(split: Split, cutoff: datetime, settings: Settings) -> datetime:
    """The end of the history ``split``'s test queries carry (module doc) for a partition's cut-off."""
    if validation_follows_cutoff(split):
        return cutoff + timedelta(days=settings.val_days)
    return cutoff


def validation_follows_cutoff(split: Split) -> bool:
    """Whether ``split``'s validation items come after the partition's cut-off, unseen by its
    embeddings: on leave-last-out (each user's second-to-last item, in the window after the
    cut-off) they do; on a temporal split they are each user's last items before it."""
    return split.info.get("protocol") == "leave_last_out"


def serving_embeddings(settings: Settings, artifacts: Artifacts, partition: str, at: datetime,
                       device: str = "cpu") -> Path:
    """``embeddings.parquet``-shaped file (``entity_id, entity_type, source_key, embedding``) of every
    entity as of ``at``, embedded by ``partition``'s encoder (module doc).

    Args:
        settings: the data home's settings (warehouse, half-lives, threads, ``embed_batch``).
        artifacts: its artefacts (the partition's snapshot state, encoder, world knowledge).
        partition: the partition whose encoder serves; at: the serving time ``s ≥ T``.
        device: torch device of inference.
    """
    out = artifacts.serving_embeddings(partition)
    model_file = artifacts.encoder_dir(partition) / "model.safetensors"
    if out.exists() and out.stat().st_mtime >= model_file.stat().st_mtime:
        return out
    from hir.graph.snapshot import STATE_DIR, build_snapshot
    from hir.graph.warehouse import connect
    from hir.models.graph import load_snapshot

    with tempfile.TemporaryDirectory(dir=artifacts.root) as folder:
        states = [artifacts.snapshot_dir(partition) / STATE_DIR]
        with connect(settings.warehouse_path, read_only=True) as con:
            build_snapshot(con, at, settings, folder, [s for s in states if s.exists()])
            keys = dict(con.execute("SELECT entity_id, source_key FROM entities").fetchall())
        graph = load_snapshot(folder)
        types = json.loads((Path(folder) / META_FILE).read_text(encoding="utf-8"))["node_types"]
        table = _embed(graph, settings, artifacts, partition, device)
    import pyarrow as pa

    from hir.storage import write_parquet

    ids = graph.entity_id.numpy()
    dim = table.shape[1]
    write_parquet(out, pa.table({
        "entity_id": pa.array(ids, pa.int64()),
        "entity_type": pa.array([types[int(t)] for t in graph.node_type], pa.string()),
        "source_key": pa.array([keys.get(int(e)) for e in ids], pa.string()),
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(table.reshape(-1), pa.float32()), dim),
    }))
    return out


def _embed(graph, settings: Settings, artifacts: Artifacts, partition: str, device: str):
    """``[N, d]`` float32 numpy embeddings of ``graph``'s nodes by ``partition``'s student."""
    from hir.models.checkpoint import load_model, read_configs
    from hir.models.inference import embed_all
    from hir.world_knowledge.vectors import read_world_knowledge

    folder = artifacts.encoder_dir(partition)
    _, encoder_config, sampler_config = read_configs(folder)
    if len(graph.edge_types) > encoder_config.num_edge_types:
        raise ValueError(f"the serving snapshot has {len(graph.edge_types)} edge types, the encoder of {partition} "
                         f"{encoder_config.num_edge_types}; retrain before serving")
    model = load_model(folder, max(1, encoder_config.num_edge_types), device=device)
    wk = read_world_knowledge(artifacts.world_knowledge(), graph.entity_id)
    backend = "flex" if str(device).startswith("cuda") else "dense"
    out = embed_all(graph, model, sampler_config, wk=wk, batch_size=settings.embed_batch, backend=backend, device=device,
                    seed=settings.seed)
    return out.embedding.numpy()
