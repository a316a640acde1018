"""World-knowledge vectors in the DuckDB warehouse, cached by ``(content_hash, model)`` (DESIGN §6).

Tables (``d`` is fixed per table; a model of another dimension recreates the table):

``text_embeddings(content_hash VARCHAR, model VARCHAR, vector FLOAT[d])``
    the sentence-transformers vector of ``content.text``.
``image_embeddings(content_hash VARCHAR, model VARCHAR, image_vector FLOAT[d], text_vector FLOAT[d], image_error VARCHAR)``
    the CLIP image-tower vector of the file at ``content.image_uri`` (NULL without an image or
    when the file could not be read, then ``image_error`` says why) and the CLIP text-tower vector
    of ``content.text`` (NULL without text), both in one space.

Both are keyed by ``(content_hash, model)`` rather than by entity: entities with identical content
share one vector, and ``content JOIN … USING (content_hash)`` gives the per-entity view. A run
embeds only the content hashes that have no row for the current model id, then deletes rows of
other model ids and of hashes no longer in ``content``; so after a run each table holds exactly
the current content under the current model, a changed text or image URI is re-embedded (its hash
changed), and a model change re-embeds everything. A failed image is cached too (its row keeps
the reason) and is retried only when its content or the model changes.

Fusion (:func:`fuse`): for each entity with content, with ``m`` its unit MiniLM vector (or a zero
block when it has no text) and ``c = normalise(mean of its available CLIP image and CLIP text
vectors)`` (or a zero block when it has neither), the world-knowledge vector is
``normalise([m ; c])``: when both blocks are present each carries half the squared norm. The CLIP
block exists in a run only when ``image_embeddings`` holds vectors for the current CLIP model, so
the dimension ``d_text (+ d_clip)`` is the same for every row of a run. Zero blocks never pass
silently: ``has_text`` and ``has_image`` say which modalities are present, and an entity with no
usable modality gets no row. Data without content (an event log alone) fuses to an empty table of
dimension 0, and training goes on without world knowledge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import duckdb
import numpy as np
import pyarrow as pa

from hir.world_knowledge.embedders import l2_normalise

TEXT_TABLE = "text_embeddings"
CLIP_TABLE = "image_embeddings"
# Rows embedded and written per transaction: bounds memory and keeps finished work on a crash.
CHUNK_ROWS = 16384

_DDL = {
    TEXT_TABLE: "CREATE TABLE IF NOT EXISTS text_embeddings (content_hash VARCHAR NOT NULL, model VARCHAR NOT NULL, "
    "vector FLOAT[{d}] NOT NULL, PRIMARY KEY (content_hash, model))",
    CLIP_TABLE: "CREATE TABLE IF NOT EXISTS image_embeddings (content_hash VARCHAR NOT NULL, model VARCHAR NOT NULL, "
    "image_vector FLOAT[{d}], text_vector FLOAT[{d}], image_error VARCHAR, PRIMARY KEY (content_hash, model))",
}
_VECTOR_COLUMN = {TEXT_TABLE: "vector", CLIP_TABLE: "text_vector"}

# Content that needs a vector, one row per hash; {cached} filters out hashes cached for the model.
_PENDING_TEXT = """
SELECT content_hash, any_value(text) AS text FROM content
WHERE coalesce(text, '') <> '' {cached} GROUP BY content_hash ORDER BY content_hash
"""
_PENDING_CLIP = """
SELECT content_hash, any_value(text) AS text, any_value(image_uri) AS image_uri FROM content
WHERE (coalesce(text, '') <> '' OR coalesce(image_uri, '') <> '') {cached} GROUP BY content_hash ORDER BY content_hash
"""


@dataclass
class EmbedReport:
    """What one embedding run did.

    Attributes:
        model: model id the vectors are stored under.
        dimension: vector dimension (0 when no vector exists yet).
        total: distinct content hashes that need a vector from this model.
        embedded: of these, embedded in this run.
        cached: of these, found in the cache.
        removed: rows deleted (other model ids, content no longer present).
        failures: ``(content_hash, image_uri, reason)`` of images that failed in this run.
    """

    model: str
    dimension: int
    total: int
    embedded: int
    cached: int
    removed: int
    failures: list[tuple[str, str, str]] = field(default_factory=list)


def table_exists(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    return bool(con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [table]).fetchone()[0])


def table_dimension(con: duckdb.DuckDBPyConnection, table: str) -> int:
    """Array size of the table's vector column ("FLOAT[384]" → 384), 0 when the table is absent."""
    row = con.execute(
        "SELECT data_type FROM duckdb_columns() WHERE table_name = ? AND column_name = ?", [table, _VECTOR_COLUMN[table]]
    ).fetchone()
    return int(row[0].rsplit("[", 1)[1].rstrip("]")) if row else 0


def _ensure_table(con: duckdb.DuckDBPyConnection, table: str, dimension: int) -> None:
    """Create ``table`` with ``FLOAT[dimension]`` vectors, replacing one of another dimension."""
    if table_exists(con, table) and table_dimension(con, table) != dimension:
        con.execute(f"DROP TABLE {table}")
    con.execute(_DDL[table].format(d=int(dimension)))


def _pending(con: duckdb.DuckDBPyConnection, table: str, sql: str, model: str) -> pa.Table:
    """Content rows (one per hash) without a cached row for ``model``."""
    if not table_exists(con, table):
        return _arrow(con, sql.format(cached=""))
    cached = f"AND content_hash NOT IN (SELECT content_hash FROM {table} WHERE model = ?)"
    return _arrow(con, sql.format(cached=cached), [model])


def _arrow(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> pa.Table:
    """The result of ``sql`` as an Arrow table, read on a cursor of ``con`` (outside any open
    transaction) so a result left open on ``con`` does not block it."""
    with con.cursor() as cursor:
        return cursor.sql(sql, params=params or None).to_arrow_table()


def _count_needed(con: duckdb.DuckDBPyConnection, sql: str) -> int:
    return con.execute(f"SELECT count(*) FROM ({sql.format(cached='')})").fetchone()[0]


def _prune(con: duckdb.DuckDBPyConnection, table: str, model: str) -> int:
    """Delete rows of other model ids and of hashes no longer in ``content``; returns the count."""
    if not table_exists(con, table):
        return 0
    return con.execute(
        f"DELETE FROM {table} WHERE model <> ? OR content_hash NOT IN (SELECT content_hash FROM content)", [model]
    ).fetchone()[0]


def vectors_to_arrow(vectors: np.ndarray, valid: np.ndarray | None = None) -> pa.FixedSizeListArray:
    """``(n, d)`` float32 → ``fixed_size_list<float32>[d]``; rows where ``valid`` is False are NULL."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    values = pa.array(vectors.reshape(-1), type=pa.float32())
    mask = None if valid is None else pa.array(~np.asarray(valid, dtype=bool))
    return pa.FixedSizeListArray.from_arrays(values, vectors.shape[1], mask=mask)


def arrow_to_vectors(column: pa.ChunkedArray | pa.Array, dimension: int) -> tuple[np.ndarray, np.ndarray]:
    """A ``FLOAT[d]`` column as ``(n, d)`` float32 (NULL rows zero) and its validity mask."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    valid = np.asarray(column.is_valid(), dtype=bool)
    out = np.zeros((len(column), dimension), dtype=np.float32)
    if valid.any():
        out[valid] = column.filter(pa.array(valid)).flatten().to_numpy(zero_copy_only=False).reshape(-1, dimension)
    return out, valid


def _insert(con: duckdb.DuckDBPyConnection, table: str, rows: pa.Table) -> None:
    con.register("wk_rows", rows)
    try:
        con.execute(f"INSERT OR REPLACE INTO {table} SELECT * FROM wk_rows").fetchall()
    finally:
        con.unregister("wk_rows")


def _run(
    con: duckdb.DuckDBPyConnection,
    table: str,
    model: str,
    pending: pa.Table,
    total: int,
    embed_chunk: Callable[[pa.Table], tuple[pa.Table, int, list]],
    progress: Callable[[int, int], None] | None,
) -> EmbedReport:
    """Embed ``pending`` chunk by chunk (one transaction each), then prune; the shared loop."""
    dimension, failures, done = table_dimension(con, table), [], 0
    for start in range(0, pending.num_rows, CHUNK_ROWS):
        rows, dimension, chunk_failures = embed_chunk(pending.slice(start, CHUNK_ROWS))
        failures += chunk_failures
        con.execute("BEGIN TRANSACTION")
        try:
            _ensure_table(con, table, dimension)
            _insert(con, table, rows)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        done += rows.num_rows
        if progress:
            progress(done, pending.num_rows)
    removed = _prune(con, table, model)
    return EmbedReport(model, dimension, total, pending.num_rows, total - pending.num_rows, removed, failures)


def embed_texts(con: duckdb.DuckDBPyConnection, embedder, progress: Callable[[int, int], None] | None = None) -> EmbedReport:
    """Bring ``text_embeddings`` up to date for ``embedder`` (a :class:`hir.world_knowledge.embedders.TextEmbedder`).

    ``progress(done, pending)`` is called after each chunk.
    """
    model = embedder.model_id
    pending = _pending(con, TEXT_TABLE, _PENDING_TEXT, model)

    def embed_chunk(chunk: pa.Table) -> tuple[pa.Table, int, list]:
        vectors = embedder.embed(chunk.column("text").to_pylist())
        rows = pa.table({
            "content_hash": chunk.column("content_hash"),
            "model": pa.array([model] * chunk.num_rows, pa.string()),
            "vector": vectors_to_arrow(vectors),
        })
        return rows, vectors.shape[1], []

    return _run(con, TEXT_TABLE, model, pending, _count_needed(con, _PENDING_TEXT), embed_chunk, progress)


def embed_clip(con: duckdb.DuckDBPyConnection, embedder, progress: Callable[[int, int], None] | None = None) -> EmbedReport:
    """Bring ``image_embeddings`` up to date for ``embedder`` (a :class:`hir.world_knowledge.embedders.ImageEmbedder`).

    Raises :class:`hir.world_knowledge.embedders.EmbedderError` when the embedder has no weights.
    """
    model = embedder.model_id
    pending = _pending(con, CLIP_TABLE, _PENDING_CLIP, model)

    def embed_chunk(chunk: pa.Table) -> tuple[pa.Table, int, list]:
        hashes = chunk.column("content_hash").to_pylist()
        texts = [t or "" for t in chunk.column("text").to_pylist()]
        uris = [u or "" for u in chunk.column("image_uri").to_pylist()]
        images, image_ok, errors, failures = _clip_images(embedder, hashes, uris)
        text_ok = np.array([bool(t) for t in texts], dtype=bool)
        text_vectors = np.zeros((len(texts), images.shape[1]), np.float32)
        if text_ok.any():
            text_vectors[text_ok] = embedder.embed_texts([t for t in texts if t])
        rows = pa.table({
            "content_hash": pa.array(hashes, pa.string()),
            "model": pa.array([model] * len(hashes), pa.string()),
            "image_vector": vectors_to_arrow(images, image_ok),
            "text_vector": vectors_to_arrow(text_vectors, text_ok),
            "image_error": pa.array(errors, pa.string()),
        })
        return rows, images.shape[1], failures

    return _run(con, CLIP_TABLE, model, pending, _count_needed(con, _PENDING_CLIP), embed_chunk, progress)


def _clip_images(embedder, hashes: Sequence[str], uris: Sequence[str]):
    """Image vectors for the rows with a URI: ``(vectors (n, d), ok mask, error per row, failures)``."""
    with_image = [i for i, u in enumerate(uris) if u]
    result = embedder.embed_images([uris[i] for i in with_image])
    dimension = embedder.load().dimension
    vectors = np.zeros((len(uris), dimension), np.float32)
    ok = np.zeros(len(uris), dtype=bool)
    rows = [with_image[i] for i in result.ok]
    vectors[rows] = result.vectors
    ok[rows] = True
    errors: list[str | None] = [None] * len(uris)
    failures = []
    for index, uri, reason in result.failures:
        errors[with_image[index]] = reason
        failures.append((hashes[with_image[index]], uri, reason))
    return vectors, ok, errors, failures


def known_image_failures(con: duckdb.DuckDBPyConnection, model: str) -> list[tuple[str, str]]:
    """``(image_uri, reason)`` of every cached image failure for ``model``, by URI."""
    if not table_exists(con, CLIP_TABLE):
        return []
    return con.execute(
        "SELECT DISTINCT c.image_uri, i.image_error FROM image_embeddings i JOIN content c USING (content_hash) "
        "WHERE i.model = ? AND i.image_error IS NOT NULL ORDER BY c.image_uri",
        [model],
    ).fetchall()


@dataclass
class Fused:
    """Result of :func:`fuse`.

    Attributes:
        table: ``entity_id BIGINT, vector fixed_size_list<float32>[d], has_text, has_image, model``.
        dimension: ``d``.
        model: the fused model id (text and, when used, CLIP model ids; ``none`` without vectors).
        without_vector: entities with content but no usable modality (no row in ``table``).
    """

    table: pa.Table
    dimension: int
    model: str
    without_vector: int


def _block_dimension(con: duckdb.DuckDBPyConnection, table: str, model: str | None, column: str) -> int:
    """Vector size of ``table`` when it holds a non-NULL ``column`` for ``model``, else 0."""
    if not model or not table_exists(con, table):
        return 0
    n = con.execute(f"SELECT count(*) FROM {table} WHERE model = ? AND {column} IS NOT NULL", [model]).fetchone()[0]
    return table_dimension(con, table) if n else 0


def fuse(con: duckdb.DuckDBPyConnection, text_model: str | None, clip_model: str | None) -> Fused:
    """One L2-normalised vector per entity with content; the scheme is in the module docstring.

    ``text_model``/``clip_model`` are the current model ids (None leaves that block out).
    """
    d_text = _block_dimension(con, TEXT_TABLE, text_model, "vector")
    d_clip = max(_block_dimension(con, CLIP_TABLE, clip_model, "image_vector"),
                 _block_dimension(con, CLIP_TABLE, clip_model, "text_vector"))
    if not d_text + d_clip:
        return _nothing_to_fuse(con)
    models = [m for m, d in ((text_model, d_text), (clip_model, d_clip)) if d]
    model = "fused(" + ",".join(f"{k}={m}" for k, m, d in (("text", text_model, d_text), ("clip", clip_model, d_clip)) if d) + ")"
    frame = _arrow(con, _fuse_query(d_text, d_clip), models)
    m, has_minilm = _block(frame, "m", d_text)
    image, has_image = _block(frame, "ci", d_clip)
    clip_text, has_clip_text = _block(frame, "ct", d_clip)
    c = l2_normalise(image + clip_text)
    keep = has_minilm | has_image | has_clip_text
    vectors = l2_normalise(np.concatenate([m, c], axis=1)[keep])
    table = pa.table({
        "entity_id": pa.array(frame.column("entity_id").to_numpy()[keep], pa.int64()),
        "vector": vectors_to_arrow(vectors),
        "has_text": pa.array((has_minilm | has_clip_text)[keep]),
        "has_image": pa.array(has_image[keep]),
        "model": pa.array([model] * int(keep.sum()), pa.string()),
    })
    return Fused(table, d_text + d_clip, model, int((~keep).sum()))


def _nothing_to_fuse(con: duckdb.DuckDBPyConnection) -> Fused:
    """No vector of any block (no content, or none with text or a readable image): an empty table
    of dimension 0 (``fixed_size_list<float32>[0]``, as Arrow cannot build rows of width 0)."""
    with_content = con.execute("SELECT count(DISTINCT entity_id) FROM content").fetchone()[0]
    table = pa.table({
        "entity_id": pa.array([], pa.int64()),
        "vector": pa.array([], pa.list_(pa.float32(), 0)),
        "has_text": pa.array([], pa.bool_()),
        "has_image": pa.array([], pa.bool_()),
        "model": pa.array([], pa.string()),
    })
    return Fused(table, 0, "none", int(with_content))


def _fuse_query(d_text: int, d_clip: int) -> str:
    """Per-entity vectors: MiniLM ``m`` and CLIP image ``ci`` / text ``ct`` for the blocks in use."""
    columns, joins = ["c.entity_id"], []
    if d_text:
        columns.append("t.vector AS m")
        joins.append("LEFT JOIN text_embeddings t ON t.content_hash = c.content_hash AND t.model = ?")
    if d_clip:
        columns += ["i.image_vector AS ci", "i.text_vector AS ct"]
        joins.append("LEFT JOIN image_embeddings i ON i.content_hash = c.content_hash AND i.model = ?")
    return f"SELECT {', '.join(columns)} FROM content c {' '.join(joins)} ORDER BY c.entity_id"


def _block(frame: pa.Table, column: str, dimension: int) -> tuple[np.ndarray, np.ndarray]:
    """``(n, dimension)`` vectors of ``column`` (zero where NULL) and where they exist; empty when unused."""
    if not dimension:
        return np.zeros((frame.num_rows, 0), np.float32), np.zeros(frame.num_rows, bool)
    return arrow_to_vectors(frame.column(column), dimension)

