"""World knowledge (DESIGN §6): the catalogue's text and images as vectors, fused per entity.

``text_embeddings`` and ``image_embeddings`` are DuckDB tables in the warehouse keyed by
``(content_hash, model)`` with ``FLOAT[d]`` vectors (layout, caching and pruning rules in
:mod:`hir.world_knowledge.store`): a re-run embeds only new or changed content, a model change re-embeds
everything. ``image_embeddings`` holds the CLIP image-tower vector of each image and the CLIP
text-tower vector of the same content's text, so images and text share a space; without usable
CLIP weights it materialises with zero rows and says why.

``world_knowledge`` writes ``<artifacts>/world_knowledge/_all/world_knowledge.parquet``
(``entity_id BIGINT, vector fixed_size_list<float32>[d], has_text BOOL, has_image BOOL,
model VARCHAR``; one L2-normalised row per entity with usable content) and ``meta.json`` — the
contract the encoder reads; without any text or image vector it is empty (dimension 0) and its
metadata says why. The fusion scheme is ``normalise([MiniLM ; normalise(mean of CLIP
image and CLIP text)])`` with missing blocks zero and flagged; see :func:`hir.world_knowledge.store.fuse`.

All three hold the DuckDB file while they run, so they use the ``duckdb_writer`` pool: DuckDB lets
no other process open a file that a writer holds.
"""

import dagster as dg
from hir.resources import ArtifactStore, Warehouse
from hir.tables import markdown_table
from hir.world_knowledge.embedders import ImageEmbedder, TextEmbedder

GROUP = "world_knowledge"
_PREVIEW_ROWS = 10
_LISTED_FAILURES = 50
EMPTY_REASON = ("no content has text or a readable image (e.g. an event log without a catalogue), "
                "so training and serving go on without world knowledge")


def _progress(context: dg.AssetExecutionContext, what: str):
    """A ``progress(done, total)`` callback that logs to the run."""
    return lambda done, total: context.log.info(f"{what}: embedded {done}/{total} new content rows")


def _counts(report) -> dict:
    """Metadata shared by both embedding assets, from an :class:`hir.world_knowledge.store.EmbedReport`."""
    return {
        "dagster/row_count": dg.MetadataValue.int(report.total),
        "model": dg.MetadataValue.text(report.model),
        "dimension": dg.MetadataValue.int(report.dimension),
        "embedded": dg.MetadataValue.int(report.embedded),
        "cached": dg.MetadataValue.int(report.cached),
        "total": dg.MetadataValue.int(report.total),
        "removed_stale_rows": dg.MetadataValue.int(report.removed),
    }


def _short(text, n: int = 48) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= n else text[: n - 1] + "…"


def _head(vector, n: int = 4) -> str:
    return "—" if vector is None else "[" + ", ".join(f"{x:+.3f}" for x in list(vector)[:n]) + ", …]"


@dg.asset(
    deps=["content"],
    group_name=GROUP,
    kinds={"duckdb", "pytorch"},
    owners=["team:hir"],
    pool="duckdb_writer",
    description="Sentence-transformers vector of each content text (default all-MiniLM-L6-v2, offline), "
    "cached by (content_hash, model): a re-run embeds only new or changed text.",
)
def text_embeddings(context: dg.AssetExecutionContext, warehouse: Warehouse, text_embedder: TextEmbedder) -> dg.MaterializeResult:
    from hir.world_knowledge.store import embed_texts

    with warehouse.connect() as con:
        report = embed_texts(con, text_embedder, progress=_progress(context, "text"))
        rows = con.execute(
            "SELECT c.entity_id, c.text, t.vector FROM text_embeddings t JOIN content c USING (content_hash) "
            "WHERE t.model = ? ORDER BY c.entity_id LIMIT ?",
            [report.model, _PREVIEW_ROWS],
        ).fetchall() if report.dimension else []
    context.log.info(f"text: {report.embedded} embedded, {report.cached} cached of {report.total} ({report.model})")
    preview = markdown_table(["entity_id", "text", "vector"], [(e, _short(t), _head(v)) for e, t, v in rows])
    return dg.MaterializeResult(metadata=_counts(report) | {"preview": dg.MetadataValue.md(preview)})


@dg.asset(
    deps=["content"],
    group_name=GROUP,
    kinds={"duckdb", "pytorch"},
    owners=["team:hir"],
    pool="duckdb_writer",
    description="open_clip image-tower vector of each content image and text-tower vector of its text, in one "
    "space; cached by (content_hash, model). Without local CLIP weights: zero rows and the reason.",
)
def image_embeddings(context: dg.AssetExecutionContext, warehouse: Warehouse, image_embedder: ImageEmbedder) -> dg.MaterializeResult:
    from hir.world_knowledge.embedders import EmbedderError
    from hir.world_knowledge.store import embed_clip

    with warehouse.connect() as con:
        try:
            report = embed_clip(con, image_embedder, progress=_progress(context, "clip"))
        except EmbedderError as exc:
            context.log.warning(f"image embeddings skipped: {exc}")
            return dg.MaterializeResult(metadata={
                "dagster/row_count": dg.MetadataValue.int(0),
                "available": dg.MetadataValue.bool(False),
                "no_weights_reason": dg.MetadataValue.text(str(exc)),
            })
        return dg.MaterializeResult(metadata=_counts(report) | _image_metadata(con, report))


def _image_metadata(con, report) -> dict:
    """Image counts, the skipped files with their reasons, and a preview, for ``image_embeddings``
    (all empty while the table does not exist: no content has had text or an image yet)."""
    from hir.world_knowledge.store import CLIP_TABLE, known_image_failures, table_exists

    images, texts, rows = 0, 0, []
    if table_exists(con, CLIP_TABLE):
        images, texts = con.execute(
            "SELECT count(image_vector), count(text_vector) FROM image_embeddings WHERE model = ?", [report.model]
        ).fetchone()
        rows = con.execute(
            "SELECT c.entity_id, c.image_uri, i.image_vector, i.image_error FROM image_embeddings i "
            "JOIN content c USING (content_hash) WHERE i.model = ? ORDER BY c.entity_id LIMIT ?",
            [report.model, _PREVIEW_ROWS],
        ).fetchall()
    failures = known_image_failures(con, report.model)
    skipped = markdown_table(["image_uri", "reason"], failures[:_LISTED_FAILURES], empty="no skipped images")
    if len(failures) > _LISTED_FAILURES:
        skipped += f"\n\n… and {len(failures) - _LISTED_FAILURES} more"
    preview = [(e, _short(u), _head(v), _short(err or "")) for e, u, v, err in rows]
    return {
        "available": dg.MetadataValue.bool(True),
        "images_embedded": dg.MetadataValue.int(images),
        "texts_embedded": dg.MetadataValue.int(texts),
        "images_skipped": dg.MetadataValue.int(len(failures)),
        "images_failed_this_run": dg.MetadataValue.int(len(report.failures)),
        "skipped_files": dg.MetadataValue.md(skipped),
        "preview": dg.MetadataValue.md(markdown_table(["entity_id", "image_uri", "image vector", "error"], preview)),
    }


@dg.asset(
    deps=["text_embeddings", "image_embeddings"],
    group_name=GROUP,
    kinds={"duckdb", "parquet"},
    owners=["team:hir"],
    pool="duckdb_writer",
    description="One L2-normalised vector per entity with content: MiniLM text block and CLIP block "
    "(mean of image and text), missing modalities flagged by has_text / has_image.",
)
def world_knowledge(
    context: dg.AssetExecutionContext,
    warehouse: Warehouse,
    artifacts: ArtifactStore,
    text_embedder: TextEmbedder,
    image_embedder: ImageEmbedder,
) -> dg.MaterializeResult:
    from hir.storage import META_FILE, write_json, write_parquet
    from hir.world_knowledge.embedders import EmbedderError
    from hir.world_knowledge.store import fuse

    try:
        clip_model = image_embedder.model_id
    except EmbedderError:
        clip_model = None
    with warehouse.connect() as con:
        fused = fuse(con, text_embedder.model_id, clip_model)
    path = artifacts.catalogue.world_knowledge()
    write_parquet(path, fused.table)
    stats = _modality_counts(fused.table)
    write_json(path.with_name(META_FILE), {"model": fused.model, "dimension": fused.dimension, "rows": fused.table.num_rows, **stats})
    context.log.info(f"world_knowledge: {fused.table.num_rows} entities, d={fused.dimension}, {fused.model}")
    metadata = {
        "dagster/row_count": dg.MetadataValue.int(fused.table.num_rows),
        "dimension": dg.MetadataValue.int(fused.dimension),
        "model": dg.MetadataValue.text(fused.model),
        "without_usable_content": dg.MetadataValue.int(fused.without_vector),
        "path": dg.MetadataValue.path(str(path)),
        "preview": dg.MetadataValue.md(_fused_preview(fused.table)),
        **{k: dg.MetadataValue.int(v) for k, v in stats.items()},
    }
    if fused.table.num_rows >= 3 and fused.dimension >= 2:
        metadata["map"] = _map(fused.table, fused.dimension)
    if not fused.dimension:
        metadata["empty_because"] = dg.MetadataValue.text(EMPTY_REASON)
        context.log.warning(f"world_knowledge is empty: {EMPTY_REASON}")
    return dg.MaterializeResult(metadata=metadata)


def _modality_counts(table) -> dict[str, int]:
    text = table.column("has_text").to_numpy(zero_copy_only=False)
    image = table.column("has_image").to_numpy(zero_copy_only=False)
    return {
        "text_and_image": int((text & image).sum()),
        "text_only": int((text & ~image).sum()),
        "image_only": int((~text & image).sum()),
    }


def _fused_preview(table) -> str:
    head = table.slice(0, _PREVIEW_ROWS).to_pylist()
    rows = [(r["entity_id"], r["has_text"], r["has_image"], _head(r["vector"])) for r in head]
    return markdown_table(["entity_id", "has_text", "has_image", "vector"], rows)


def _map(table, dimension: int) -> dg.MetadataValue:
    """A 2-D PCA map of up to 2,000 fused vectors, coloured by which modalities they carry."""
    import numpy as np
    from hir.plots import figure, png_markdown
    from hir.world_knowledge.store import arrow_to_vectors

    sample = table.slice(0, 2000)
    x, _ = arrow_to_vectors(sample.column("vector"), dimension)
    x = x - x.mean(axis=0)
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    xy = x @ vt[:2].T
    text = sample.column("has_text").to_numpy(zero_copy_only=False)
    image = sample.column("has_image").to_numpy(zero_copy_only=False)
    fig, ax = figure(5, 4)
    for mask, label in ((text & image, "text+image"), (text & ~image, "text only"), (~text & image, "image only")):
        if mask.any():
            ax.scatter(xy[mask, 0], xy[mask, 1], s=6, alpha=0.6, label=label)
    ax.set_title("world knowledge: first two principal components")
    ax.legend(loc="best", fontsize=7)
    return png_markdown(fig, "world knowledge map")
