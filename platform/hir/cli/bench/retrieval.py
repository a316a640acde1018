"""Token-index retrieval against exact search: `hir bench retrieval --items 100000 --json`.

Items and queries are clustered unit vectors (:func:`hir.cli.bench.quantizer.clustered_vectors`). A
hierarchical quantizer trained on a sample gives every item a bag of its own codes (one token per
level, weight 1) and every query the same; the index scores candidates by weighted token overlap
(gathering the shortest posting lists up to ``--budget`` postings, the common ones scored by binary
search) and re-ranks the best ``--candidates`` by embedding score. Exact search is the brute-force
top-100 of ``items @ q`` in torch; faiss IndexIVFPQ is a reference. Latencies are per query
(single query, p50 over ``--queries``), measured as CPU time of the querying thread
(``time.thread_time``) with one thread for torch and faiss alike, so that other load on a shared
machine does not distort the ratio.
``recall_at_100_vs_exact`` = mean |index top-100 ∩ exact top-100| / 100.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from hir.settings import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--items", type=int, default=100_000, help="indexed items")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--queries", type=int, default=300, help="queries timed (p50 reported)")
    parser.add_argument("--codes", default="16,192,2048", help="codewords per level of the quantizer")
    parser.add_argument("--train", type=int, default=20_000, help="items sampled to train the quantizer")
    parser.add_argument("--candidates", type=int, default=2000, help="overlap candidates re-ranked by embedding score")
    parser.add_argument("--budget", type=int, default=3000, help="postings gathered per query (0 = all)")
    parser.add_argument("--seed", type=int, default=0)


def _p50_ms(fn, queries) -> tuple[float, list]:
    """Median thread CPU time of ``fn(i)`` over the queries (after one warm-up call) and the results."""
    fn(0)
    times, results = [], []
    for i in range(len(queries)):
        start = time.thread_time()
        results.append(fn(i))
        times.append(time.thread_time() - start)
    return float(np.median(times) * 1e3), results


def _index(items, args):
    """Train the quantizer on a sample, encode everything, index the items' own-code bags.

    Items are stored in code order (lexicographic by level 1, 2, …), as an IVF stores its lists,
    so that the entities of a posting list lie close together in memory. Returns the quantizer,
    the index and the items in that order.
    """
    import torch

    from hir.models.index import InvertedIndex
    from hir.models.quantizer import HierarchicalQuantizer, QuantizerConfig, token_ids

    codes = [int(c) for c in args.codes.split(",")]
    config = QuantizerConfig(dim=items.shape[1], codes=codes, iterations=3, ils_rounds=0, seed=args.seed)
    quantizer = HierarchicalQuantizer(config)
    sample = torch.randperm(items.shape[0], generator=torch.Generator().manual_seed(args.seed))[: args.train]
    quantizer.fit(items[sample])
    tokens = token_ids(quantizer.encode(items))
    order = torch.from_numpy(np.lexsort(tokens.numpy().T[::-1]))
    items, tokens = items[order].contiguous(), tokens[order]
    n, levels = tokens.shape
    index = InvertedIndex.build(torch.arange(n).repeat_interleave(levels), tokens.reshape(-1), torch.ones(n * levels),
                                torch.arange(n), torch.zeros(n, dtype=torch.int64), ["item"])
    return quantizer, index, items


def _faiss_ivfpq(items: np.ndarray, queries: np.ndarray):
    import faiss

    dim = items.shape[1]
    nlist = max(16, int(4 * np.sqrt(items.shape[0])))
    ivf = faiss.IndexIVFPQ(faiss.IndexFlatIP(dim), dim, nlist, dim // 4, 8, faiss.METRIC_INNER_PRODUCT)
    ivf.train(items[: max(nlist * 40, 20_000)])
    ivf.add(items)
    ivf.nprobe = 16
    return _p50_ms(lambda i: ivf.search(queries[i:i + 1], 100), queries)[0]


def run(args: argparse.Namespace, settings: Settings) -> dict:
    import faiss
    import torch

    from hir.cli.bench.quantizer import clustered_vectors
    from hir.models.quantizer import token_ids

    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    data = clustered_vectors(args.items + args.queries, args.dim, seed=args.seed)
    items_np, queries_np = data[: args.items], data[args.items:]
    queries = torch.from_numpy(queries_np)
    quantizer, index, items = _index(torch.from_numpy(items_np), args)
    q_tokens = token_ids(quantizer.encode(queries))
    ones = torch.ones(q_tokens.shape[1])
    exact_ms, exact = _p50_ms(lambda i: (items @ queries[i]).topk(100).indices, queries)
    index_ms, found = _p50_ms(
        lambda i: index.search(q_tokens[i], ones, 100, query_vector=queries[i], vectors=items,
                               candidates=args.candidates, budget=args.budget)[0],
        queries,
    )
    recall = np.mean([len(set(e.tolist()) & set(f.tolist())) / 100 for e, f in zip(exact, found)])
    return {
        "items": args.items,
        "index_p50_ms": round(index_ms, 4),
        "exact_p50_ms": round(exact_ms, 4),
        "faiss_ivfpq_p50_ms": round(_faiss_ivfpq(items.numpy(), queries_np), 4),
        "speedup_vs_exact": round(exact_ms / index_ms, 2),
        "recall_at_100_vs_exact": round(float(recall), 4),
    }
