"""Training stage (DESIGN §7): the self-supervised HIR encoder and the embeddings of every entity.

``hir_encoder`` trains :class:`hir.models.trainer.Trainer` on the partition's graph snapshot (plus
world knowledge when present). It checkpoints into ``<artifacts>/hir_encoder/.work-<D>/`` while it
runs, so a killed run resumes where it stopped, and publishes the final checkpoint as the
partition (``model.safetensors``, ``optimizer.safetensors``, ``config.json``, ``state.json``).
With ``HIR_WARM_START`` (default on) it starts from the newest earlier partition's checkpoint and
fine-tunes for ``HIR_FINETUNE_STEPS``: hashed id tables and prototypes carry over, new entities
need no resizing.

``entity_embeddings`` embeds every entity of the snapshot (cold-start entities included) with the
trained student through the ``flex`` attention backend — after a self-check against ``dense`` on
this machine (:func:`hir.models.inference.flex_self_check`); where they disagree by more than
``FLEX_TOLERANCE`` it falls back to ``dense`` and says so — and writes ``embeddings.parquet``:
``entity_id, entity_type, source_key, embedding FLOAT[d], coarse_prototype, fine_prototype,
model_version, cutoff``. The prototype columns are interest clusters fitted on the final
embeddings (:func:`hir.models.clustering.nested_clusters`: per-type mean removed, spherical k-means
into ``HIR_TRAIN_COARSE`` clusters, then ``HIR_TRAIN_FINE / HIR_TRAIN_COARSE`` nested inside each);
the learned prototypes' NMI against a planted truth is reported beside theirs.
"""

import shutil

import dagster as dg
from hir.errors import SourceError
from hir.partitions import DAILY, cutoff_of
from hir.resources import ArtifactStore, SettingsResource, TorchRuntime, Warehouse
from hir.tables import markdown_table

GROUP = "training"
PREVIEW_ROWS = 10
FLEX_TOLERANCE = 1e-3  # float32 flex and dense differ by ~1e-6; a faulty kernel by 0.1 or NaN
_CURVES = ("loss", "loss_next", "loss_proto", "loss_pair", "loss_hier", "loss_eng", "loss_nce")
_COLLAPSE = ("entropy_coarse", "entropy_fine", "top_share_coarse", "top_share_fine", "emb_std")


def _trainer(context, graph, configs, work, wk, device):
    """A trainer over ``work``. A leftover checkpoint of other settings is discarded, then a warm
    start whose checkpoint no longer fits the settings falls back to training from scratch."""
    import dataclasses

    from hir.models.checkpoint import CheckpointMismatch
    from hir.models.trainer import Trainer

    def log(record):
        context.log.info("step {step}: loss {loss:.4f} entropy {entropy_coarse:.2f}/{entropy_fine:.2f}".format(**record))

    train, encoder, sampler = configs
    try:
        return Trainer(graph, train, encoder, sampler, work, wk=wk, device=device, log=log)
    except CheckpointMismatch as exc:
        context.log.warning(f"discarding an interrupted run: {exc}")
        shutil.rmtree(work, ignore_errors=True)
    try:
        return Trainer(graph, train, encoder, sampler, work, wk=wk, device=device, log=log)
    except CheckpointMismatch as exc:
        context.log.warning(f"the warm-start checkpoint does not fit the settings, training from scratch: {exc}")
    return Trainer(graph, dataclasses.replace(train, warm_start=""), encoder, sampler, work, wk=wk, device=device, log=log)


def _curves_plot(metrics: list[dict]) -> dg.MetadataValue:
    from hir.plots import figure, png_markdown

    fig, (left, right) = figure(10, 3.2, ncols=2)
    steps = [m["step"] for m in metrics]
    for name in _CURVES:
        if metrics and name in metrics[0]:
            left.plot(steps, [m[name] for m in metrics], label=name)
    left.set(title="training losses", xlabel="step")
    left.legend(fontsize=7)
    for name in _COLLAPSE:
        if metrics and name in metrics[0]:
            right.plot(steps, [m[name] for m in metrics], label=name)
    right.set(title="collapse guards", xlabel="step", ylim=(0, 1.05))
    right.legend(fontsize=7)
    fig.tight_layout()
    return png_markdown(fig, "hir_encoder training")


def gradient_shares(metrics: list[dict]) -> dict[str, float]:
    """Each loss's mean share of the gradient norm over the records that measured it
    (``grad_share_<loss>``, see ``hir.models.trainer``); empty when none did."""
    measured = [m for m in metrics if any(k.startswith("grad_share_") for k in m)]
    names = sorted({k for m in measured for k in m if k.startswith("grad_share_")})
    return {name.removeprefix("grad_share_"): sum(m.get(name, 0.0) for m in measured) / len(measured) for name in names}


def _metrics_table(record: dict) -> str:
    rows = [(k, v) for k, v in record.items() if isinstance(v, float)]
    return markdown_table(["metric", "value"], rows, {"value": ".4f"})


@dg.asset(
    partitions_def=DAILY,
    deps=["graph_snapshot", "world_knowledge"],
    group_name=GROUP,
    kinds={"pytorch", "safetensors"},
    owners=["team:hir"],
    description=(
        "Graph transformer trained on causal examples: each user's view as of an engagement predicts "
        "what it engages with next (sampled softmax with logQ correction and the log prior), plus "
        "cross-view distillation onto Sinkhorn-Knopp prototypes and an engagement head; each loss's "
        "share of the gradient norm is reported; warm-starts from the previous partition's checkpoint."
    ),
)
def hir_encoder(context: dg.AssetExecutionContext, artifacts: ArtifactStore, torch_runtime: TorchRuntime, hir_settings: SettingsResource):
    from hir.training.inputs import training_run

    partition = context.partition_key
    device = torch_runtime.setup()
    run = training_run(hir_settings.get(), partition, device.type)
    graph, wk, warm, work = run.graph, run.wk, run.warm_start, run.work
    trainer = _trainer(context, graph, run.configs, work, wk, device)
    context.log.info(
        f"training on {graph.num_nodes} nodes, {graph.csr.num_edges // 2} edges, world knowledge "
        f"{'none' if wk is None else wk.shape[1]}, {'warm from ' + warm if warm else 'from scratch'}"
    )
    result = trainer.fit()
    from hir.models.checkpoint import CHECKPOINT_FILES

    with artifacts.write_partition("hir_encoder", partition) as out:
        for name in CHECKPOINT_FILES:
            shutil.copy2(work / name, out / name)
    shutil.rmtree(work, ignore_errors=True)
    folder = artifacts.catalogue.encoder_dir(partition)
    final = result.metrics[-1] if result.metrics else {}
    shares = gradient_shares(result.metrics)
    return dg.MaterializeResult(
        metadata={
            "checkpoint": dg.MetadataValue.path(str(folder)),
            "parameters": dg.MetadataValue.int(result.parameters),
            "steps": dg.MetadataValue.int(result.step),
            "train_seconds": dg.MetadataValue.float(round(result.seconds, 2)),
            "warm_started_from": dg.MetadataValue.text(result.warm_started_from or "scratch"),
            "world_knowledge_dim": dg.MetadataValue.int(0 if wk is None else int(wk.shape[1])),
            "final_loss": dg.MetadataValue.float(float(final.get("loss", float("nan")))),
            "final_entropy_coarse": dg.MetadataValue.float(float(final.get("entropy_coarse", float("nan")))),
            "final_entropy_fine": dg.MetadataValue.float(float(final.get("entropy_fine", float("nan")))),
            "final_metrics": dg.MetadataValue.md(_metrics_table(final)),
            "gradient_shares": dg.MetadataValue.md(markdown_table(
                ["loss", "share of the gradient norm"], sorted(shares.items()), {"share of the gradient norm": ".3f"},
                empty="not measured (HIR_TRAIN_GRAD_SHARE_EVERY is 0 or above the steps run)")),
            "selected_cycle": dg.MetadataValue.int(result.selected_cycle),
            "held_out_examples": dg.MetadataValue.int(0 if trainer.validation is None else len(trainer.validation.held_out)),
            "held_out_recall_by_cycle": dg.MetadataValue.md(markdown_table(
                ["cycle", "held-out Recall@10", "kept"],
                [(i + 1, r, "yes" if i + 1 == result.selected_cycle else "") for i, r in enumerate(result.cycle_recall)],
                {"held-out Recall@10": ".4f"}, empty="no held-out choice (HIR_TRAIN_CYCLES=1, HIR_TRAIN_HOLDOUT_USERS=0, or under 10 users)")),
            "curves": _curves_plot(result.metrics),
        }
    )


def _source_keys(warehouse: Warehouse, entity_ids) -> dict:
    with warehouse.connect(read_only=True) as con:
        rows = con.execute("SELECT entity_id, source_key FROM entities").fetchall()
    return dict(rows)


def _planted_nmi(warehouse: Warehouse, entity_ids, coarse, fine) -> dict | None:
    """NMI of the coarse/fine prototypes against ``planted_truth`` where that table exists."""
    import numpy as np
    from sklearn.metrics import normalized_mutual_info_score

    with warehouse.connect(read_only=True) as con:
        exists = con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", ["planted_truth"]
        ).fetchone()[0]
        if not exists:
            return None
        truth = con.execute("SELECT entity_id, coarse_interest, fine_interest FROM planted_truth").fetchall()
    if not truth:
        return None
    index = {int(e): i for i, e in enumerate(entity_ids)}
    rows = [(index[int(e)], c, f) for e, c, f in truth if int(e) in index and c is not None]
    with_fine = [r for r in rows if r[2] is not None and r[2] >= 0]
    if not rows:
        return None
    pos, pos_fine = np.array([r[0] for r in rows]), np.array([r[0] for r in with_fine], dtype=np.int64)
    return {
        "entities": len(rows),
        "nmi_coarse": float(normalized_mutual_info_score([r[1] for r in rows], coarse[pos])),
        # fine_interest is numbered within its coarse interest: the label is the pair.
        "nmi_fine": float(normalized_mutual_info_score([f"{r[1]}/{r[2]}" for r in with_fine], fine[pos_fine])) if with_fine else float("nan"),
    }


def _attention_backend(context, graph, model, sampler_config, wk, batch_size: int, device) -> tuple[str, float]:
    """``flex`` where it agrees with ``dense`` on this machine, else ``dense``; and the difference."""
    from hir.models.inference import flex_self_check

    diff = flex_self_check(graph, model, sampler_config, wk=wk, batch_size=batch_size, device=device)
    if diff <= FLEX_TOLERANCE:
        return "flex", diff
    context.log.warning(f"flex attention differs from dense by {diff:.3g} on this machine; embedding with dense")
    return "dense", diff


def _require_finite(embedding, entity_ids, keys: dict) -> None:
    """Refuse to write non-finite vectors, naming the first entities that have them."""
    import numpy as np

    bad = np.flatnonzero(~np.isfinite(embedding).all(axis=1))
    if bad.size:
        names = ", ".join(f"{int(entity_ids[i])} ({keys.get(int(entity_ids[i]))})" for i in bad[:5])
        raise ValueError(f"entity_embeddings: {bad.size} non-finite embedding(s), not written; first: {names}")


def _embedding_plot(embedding, coarse) -> dg.MetadataValue:
    """Prototype sizes beside a 2-D PCA map of (at most 5,000) embeddings coloured by coarse prototype."""
    import numpy as np
    from hir.plots import figure, png_markdown

    fig, (left, right) = figure(10, 3.4, ncols=2)
    sizes = np.bincount(coarse)
    left.bar(np.arange(sizes.size), sizes)
    left.set(title="entities per coarse prototype", xlabel="coarse prototype")
    rng = np.random.default_rng(0)
    pick = rng.choice(len(embedding), size=min(5000, len(embedding)), replace=False)
    x = embedding[pick] - embedding[pick].mean(0)
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    xy = x @ vt[:2].T
    right.scatter(xy[:, 0], xy[:, 1], c=coarse[pick], s=3, cmap="tab20")
    right.set(title="embedding map (PCA), colour = coarse prototype")
    fig.tight_layout()
    return png_markdown(fig, "entity embeddings")


@dg.asset(
    partitions_def=DAILY,
    deps=["hir_encoder", "graph_snapshot", "world_knowledge"],
    group_name=GROUP,
    kinds={"pytorch", "parquet"},
    owners=["team:hir"],
    description=(
        "One embedding per entity existing before the cut-off (cold-start entities included), "
        "with its nested coarse and fine interest cluster (two-level spherical k-means of the "
        "embeddings after removing each node type's mean), from the trained student (flex attention, "
        "checked against dense on this machine first)."
    ),
)
def entity_embeddings(
    context: dg.AssetExecutionContext, artifacts: ArtifactStore, warehouse: Warehouse, torch_runtime: TorchRuntime, hir_settings: SettingsResource
):
    import hashlib

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from hir.models.checkpoint import load_model, read_configs
    from hir.models.clustering import nested_clusters
    from hir.models.inference import embed_all
    from hir.storage import EMBEDDINGS_FILE, SNAPSHOT_NODES_FILE, write_parquet
    from hir.training.inputs import load_partition_graph, load_world_knowledge

    settings = hir_settings.get()
    partition = context.partition_key
    device = torch_runtime.setup()
    graph = load_partition_graph(settings, partition)
    wk = load_world_knowledge(settings, graph)
    folder = artifacts.catalogue.encoder_dir(partition)
    if not (folder / "model.safetensors").exists():
        raise SourceError(f"hir_encoder {partition} is missing at {folder}; materialise it first")
    model = load_model(folder, max(1, len(graph.edge_types)), device=device)
    _, _, sampler_config = read_configs(folder)
    step = max(1, graph.num_nodes // 10)

    def progress(done, total):
        if done % step < settings.embed_batch or done == total:
            context.log.info(f"embedded {done}/{total} entities")

    backend, flex_diff = _attention_backend(context, graph, model, sampler_config, wk, settings.embed_batch, device)
    out = embed_all(graph, model, sampler_config, wk=wk, batch_size=settings.embed_batch, backend=backend, device=device, progress=progress)
    digest = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()[:12]
    version = f"hir-{partition}-{digest}"
    entity_ids = graph.entity_id.numpy()
    types = pq.read_table(artifacts.catalogue.snapshot_dir(partition) / SNAPSHOT_NODES_FILE, columns=["entity_type"]).column(0)
    keys = _source_keys(warehouse, entity_ids)
    embedding = out.embedding.numpy().astype(np.float32)
    _require_finite(embedding, entity_ids, keys)
    train_config, _, _ = read_configs(folder)
    top, low = nested_clusters(out.embedding, graph.node_type, train_config.coarse, train_config.fine, seed=settings.seed)
    coarse, fine = top.numpy().astype(np.int32), low.numpy().astype(np.int32)
    dim = embedding.shape[1]
    table = pa.table({
        "entity_id": pa.array(entity_ids, pa.int64()),
        "entity_type": types,
        "source_key": pa.array([keys.get(int(e)) for e in entity_ids], pa.string()),
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(embedding.reshape(-1), pa.float32()), dim),
        "coarse_prototype": pa.array(coarse, pa.int32()),
        "fine_prototype": pa.array(fine, pa.int32()),
        "model_version": pa.array([version] * len(entity_ids), pa.string()),
        "cutoff": pa.array([cutoff_of(partition)] * len(entity_ids), pa.timestamp("us", tz="UTC")),
    })
    with artifacts.write_partition("entity_embeddings", partition) as tmp:
        write_parquet(tmp / EMBEDDINGS_FILE, table)
    nmi = _planted_nmi(warehouse, entity_ids, coarse, fine)
    learned = _planted_nmi(warehouse, entity_ids, out.coarse.numpy(), out.fine.numpy())
    preview = table.slice(0, PREVIEW_ROWS).select(["entity_id", "entity_type", "source_key", "coarse_prototype", "fine_prototype"])
    metadata = {
        "dagster/row_count": dg.MetadataValue.int(table.num_rows),
        "dimension": dg.MetadataValue.int(dim),
        "model_version": dg.MetadataValue.text(version),
        "attention_backend": dg.MetadataValue.text(backend),
        "flex_dense_max_abs_diff": dg.MetadataValue.float(flex_diff),
        "coarse_prototypes_used": dg.MetadataValue.int(int(np.unique(coarse).size)),
        "fine_prototypes_used": dg.MetadataValue.int(int(np.unique(fine).size)),
        "preview": dg.MetadataValue.md(preview.to_pandas().to_markdown(index=False)),
        "plot": _embedding_plot(embedding, coarse),
        "path": dg.MetadataValue.path(str(artifacts.catalogue.embeddings(partition))),
    }
    if nmi:
        metadata["nmi_coarse_vs_planted"] = dg.MetadataValue.float(round(nmi["nmi_coarse"], 4))
        metadata["nmi_fine_vs_planted"] = dg.MetadataValue.float(round(nmi["nmi_fine"], 4))
        metadata["nmi_learned_prototypes_coarse_vs_planted"] = dg.MetadataValue.float(round(learned["nmi_coarse"], 4))
        context.log.info(f"NMI vs planted truth over {nmi['entities']} entities: coarse {nmi['nmi_coarse']:.3f}, fine {nmi['nmi_fine']:.3f}")
    return dg.MaterializeResult(metadata=metadata)
