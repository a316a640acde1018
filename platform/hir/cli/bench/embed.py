"""Text embedding throughput: the product's incremental path against bare ``SentenceTransformer.encode``.

`hir bench embed --items N` writes ``N`` distinct synthetic product titles (3–24 words, from the
synthetic ecosystem's vocabulary) into the ``content`` table of a temporary warehouse (untimed),
loads the configured text model once (untimed, as the embedder resource keeps it), then times in
this process:

* bare: ``SentenceTransformer.encode(texts, batch_size, normalize_embeddings=True)`` on the texts;
* hir: :func:`hir.world_knowledge.store.embed_texts` on an empty cache — the ``text_embeddings`` asset's
  path: find content without a cached vector, encode it with the same model and batch size, store
  ``FLOAT[d]`` rows in DuckDB, prune stale rows;
* incremental: 1 % of the texts changed in ``content`` (untimed), then ``embed_texts`` again.

Both paths sort texts by length before batching (``encode`` does it internally). Each timing runs
``--repeat`` times and the fastest counts. ``ratio_to_bare = items_per_s / bare_items_per_s``
(target ≥ 0.9); ``incremental_time_ratio = incremental seconds / full hir seconds`` (target ≤ 0.05).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from hir.settings import Settings

CHANGED = 0.01


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--items", type=int, default=20_000, help="distinct texts to embed")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per measurement; the fastest counts")
    parser.add_argument("--batch-size", type=int, default=0, help="encode batch size (default HIR_TEXT_BATCH_SIZE)")
    parser.add_argument("--seed", type=int, default=0)


def synthetic_titles(n: int, seed: int) -> list[str]:
    """``n`` distinct titles: a brand, 3–24 words of one fine interest's vocabulary and a model number."""
    from hir.graph.sources.synthetic_vocab import BRAND_SYLLABLES, THEMES

    vocab = [words + [fine, coarse] for coarse, fines in THEMES.items() for fine, words in fines.items()]
    rng = np.random.default_rng(seed)
    topics = rng.integers(0, len(vocab), n)
    lengths = rng.integers(3, 25, n)
    titles = []
    for i in range(n):
        brand = "".join(rng.choice(BRAND_SYLLABLES, 2)).capitalize()
        words = rng.choice(vocab[topics[i]], lengths[i])
        titles.append(f"{brand} {' '.join(words)} model {i}")
    return titles


def _fill_content(con, texts: list[str], start_id: int = 0) -> None:
    """Upsert ``texts`` as the content of entities ``start_id …`` with the loader's content hash."""
    rows = pa.table({"entity_id": pa.array(np.arange(start_id, start_id + len(texts)), pa.int64()), "text": texts})
    con.register("bench_rows", rows)
    try:
        con.execute(
            "INSERT OR REPLACE INTO content SELECT entity_id, text, NULL, sha256(coalesce(text, '') || chr(0)) FROM bench_rows"
        ).fetchall()
    finally:
        con.unregister("bench_rows")


def _fastest(repeat: int, prepare, timed) -> float:
    """Minimum over ``repeat`` runs of ``timed()``'s wall time; ``prepare()`` runs untimed before each."""
    best = float("inf")
    for _ in range(max(1, repeat)):
        prepare()
        start = time.perf_counter()
        timed()
        best = min(best, time.perf_counter() - start)
    return best


def _say(message: str) -> None:
    print(f"bench embed: {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace, settings: Settings) -> dict:
    from hir.graph.warehouse import connect
    from hir.world_knowledge.embedders import TextEmbedder
    from hir.world_knowledge.store import embed_texts

    embedder = TextEmbedder(
        model=settings.text_model, batch_size=args.batch_size or settings.text_batch_size, device=settings.embed_device
    )
    texts = synthetic_titles(args.items, args.seed)
    model = embedder.load()
    model.encode(texts[:64], batch_size=embedder.batch_size, show_progress_bar=False)  # warm-up, untimed
    n_changed = max(1, round(args.items * CHANGED))
    changed = [t.replace(" model ", " edition ") for t in texts[:n_changed]]

    _say(f"bare encode of {args.items} texts")
    bare = _fastest(args.repeat, lambda: None, lambda: model.encode(
        texts, batch_size=embedder.batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
    ))
    with tempfile.TemporaryDirectory(prefix="hir-bench-embed-") as tmp, connect(Path(tmp) / "warehouse.duckdb", threads=settings.threads) as con:
        _fill_content(con, texts)

        def reset() -> None:
            con.execute("DROP TABLE IF EXISTS text_embeddings").fetchall()
            _fill_content(con, texts)

        _say(f"hir embed_texts of {args.items} texts (empty cache)")
        full = _fastest(args.repeat, reset, lambda: embed_texts(con, embedder))
        _say(f"incremental: {n_changed} texts changed")
        report = None

        def rerun() -> None:
            nonlocal report
            report = embed_texts(con, embedder)

        def change() -> None:
            _fill_content(con, texts[:n_changed])
            embed_texts(con, embedder)
            _fill_content(con, changed)

        incremental = _fastest(args.repeat, change, rerun)
    if report.embedded != n_changed:
        raise RuntimeError(f"incremental run embedded {report.embedded}, expected {n_changed}")
    return {
        "items": args.items,
        "items_per_s": round(args.items / full, 1),
        "bare_items_per_s": round(args.items / bare, 1),
        "ratio_to_bare": round(bare / full, 3),
        "incremental_changed": CHANGED,
        "incremental_time_ratio": round(incremental / full, 4),
    }
