"""Token-index retrieval against exact search: `hir bench retrieval --items 100000 --json`.

Items and queries are clustered unit vectors (:func:`hir.cli.bench.quantizer.clustered_vectors`). A
hierarchical quantizer trained on a sample gives every item its nested tokens (one per level, the
path of codes ``1 … l``), weighted as every Bag-of-Meaning bag is (:func:`hir.tokens.bom.bag_weights`:
idf × saturation, unit norm). A query's bag holds the ``--probes`` finest tokens whose path
reconstruction ``Σ_m C_m[i_m]`` scores highest against it, each weighted by that score above the
lowest kept. The bags are made in one batch (as the evaluation makes every user's), so
``index_p50_ms`` does not hold them; ``query_bag_p50_ms`` is the cost of making one alone, as
``hir retrieve`` does at query time (a product with every finest path of the catalogue). Retrieval
gathers the postings of those tokens and re-ranks them by embedding score (at most ``--candidates``).

The bags are searched by hir's own :class:`~hir.models.index.InvertedIndex` (items stored in code
order, as an IVF stores its lists, so a posting list is contiguous in memory). FAISS on the dense
vectors is the reference at equal recall: IVF-PQ (with and without an exact re-rank of its best
``k_factor × 100``, :data:`IVFPQ_SETTINGS`) and IVF-Flat (:data:`IVFFLAT_PROBES`), each reported at
its fastest setting that reaches the token index's recall. (Seismic, ``pyseismic-lsr`` 0.5.4, was
measured on the same bags, asked for the top ``--candidates`` by overlap and re-ranked the same way:
at 100,000 items 1.50 ms per query against this index's 0.28 ms at the same recall, so it was not kept.)

Exact search is the brute-force top-100 of ``items @ q`` in torch. Latencies are per query
(single query, p50 over ``--queries``), measured as CPU time of the querying thread
(``time.thread_time``) with one thread for torch and faiss alike, so that other load on
a shared machine does not distort the ratio. ``recall_at_100_vs_exact`` (and the ``*_recall``
keys) = mean |top-100 ∩ exact top-100| / 100.
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
    parser.add_argument("--probes", type=int, default=500, help="finest-level tokens in a query's bag")
    parser.add_argument("--candidates", type=int, default=4000, help="most gathered postings re-ranked by embedding score")
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


def _recall(exact: list, found: list) -> float:
    return round(float(np.mean([len(set(np.asarray(e).tolist()) & set(np.asarray(f).tolist())) / 100
                                for e, f in zip(exact, found)])), 4)


def _item_bags(items, args):
    """Quantizer on a sample, items in code order, their nested tokens and unit-norm bag weights.

    Returns the quantizer, the items in that order, their ``[n, M]`` codes and the
    bags (scipy CSR over the distinct tokens, with the token id of each column).
    """
    import scipy.sparse as sp
    import torch

    from hir.models.quantizer import HierarchicalQuantizer, QuantizerConfig, token_ids
    from hir.tokens.bom import bag_weights

    sizes = [int(c) for c in args.codes.split(",")]
    config = QuantizerConfig(dim=items.shape[1], codes=sizes, iterations=3, ils_rounds=0, seed=args.seed)
    quantizer = HierarchicalQuantizer(config)
    sample = torch.randperm(items.shape[0], generator=torch.Generator().manual_seed(args.seed))[: args.train]
    quantizer.fit(items[sample])
    codes = quantizer.encode(items)
    order = torch.from_numpy(np.lexsort(codes.numpy().T[::-1]))
    items, codes = items[order].contiguous(), codes[order]
    tokens = token_ids(codes, sizes).numpy()
    columns, column = np.unique(tokens, return_inverse=True)
    n, levels = tokens.shape
    own = sp.csr_matrix((np.ones(n * levels), (np.repeat(np.arange(n), levels), column.ravel())), shape=(n, columns.size))
    return quantizer, items, codes, bag_weights(own), columns


def _query_bags(queries, quantizer, codes, sizes, probes: int):
    """Each query's bag (:func:`hir.tokens.bom.query_bags`): its ``probes`` finest tokens nearest it,
    and the p50 milliseconds of making one query's bag on its own (as ``hir retrieve`` does)."""
    import torch

    from hir.tokens.bom import query_bags, type_paths

    codes, queries = codes.numpy(), queries.numpy()
    tokens, centres = type_paths(quantizer, codes, np.zeros(codes.shape[0]), 0, sizes)
    q_tokens, q_weights = query_bags(queries, tokens, centres, probes)
    one_ms, _ = _p50_ms(lambda i: query_bags(queries[i:i + 1], tokens, centres, probes), queries)
    return torch.from_numpy(q_tokens), torch.from_numpy(q_weights), one_ms


IVFPQ_SETTINGS = [(nprobe, refine) for nprobe in (16, 32, 64) for refine in (0, 2, 4, 8)]
"""FAISS IVF-PQ's ``(nprobe, k_factor)`` tried: without (0) and with an exact re-rank of its best
``k_factor × 100`` codes (``IndexRefineFlat``, as the token index re-ranks), so that it can reach the
token index's recall."""

IVFFLAT_PROBES = (1, 2, 4, 8, 16, 32, 64)


def _fastest_at_recall(trials: list[tuple[dict, float, float]], target: float) -> tuple[dict, float, float]:
    """Of ``(setting, p50_ms, recall)`` trials, the fastest reaching ``target`` recall, else the most accurate."""
    reaching = [trial for trial in trials if trial[2] >= target]
    return min(reaching, key=lambda t: t[1]) if reaching else max(trials, key=lambda t: (t[2], -t[1]))


def _faiss_at_recall(items: np.ndarray, queries: np.ndarray, exact: list, target: float) -> dict:
    """FAISS IVF-PQ and IVF-Flat on the dense vectors, each at its fastest setting that reaches the
    token index's recall ``target`` (or its most accurate): the comparison at equal recall."""
    import faiss

    dim = items.shape[1]
    nlist = max(16, int(4 * np.sqrt(items.shape[0])))
    # a random sample: the items come in code order, a prefix would hold a few clusters only
    train = items[np.random.default_rng(0).permutation(items.shape[0])[: max(nlist * 40, 20_000)]]
    ivf = faiss.IndexIVFPQ(faiss.IndexFlatIP(dim), dim, nlist, dim // 4, 8, faiss.METRIC_INNER_PRODUCT)
    ivf.train(train)
    refined = faiss.IndexRefineFlat(ivf)
    refined.add(items)
    flat = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
    flat.train(train)
    flat.add(items)

    def trial(index, setting: dict) -> tuple[dict, float, float]:
        ms, found = _p50_ms(lambda i: index.search(queries[i:i + 1], 100)[1][0], queries)
        return setting, ms, _recall(exact, found)

    pq_trials = []
    for nprobe, refine in IVFPQ_SETTINGS:
        ivf.nprobe, refined.k_factor = nprobe, max(refine, 1)
        pq_trials.append(trial(refined if refine else ivf, {"nprobe": nprobe, "refine": refine}))
    flat_trials = []
    for nprobe in IVFFLAT_PROBES:
        flat.nprobe = nprobe
        flat_trials.append(trial(flat, {"nprobe": nprobe}))
    pq, flat_best = _fastest_at_recall(pq_trials, target), _fastest_at_recall(flat_trials, target)
    return {
        "faiss_ivfpq_p50_ms": round(pq[1], 4),
        "faiss_ivfpq_recall_at_100": pq[2],
        "faiss_ivfpq_nprobe": pq[0]["nprobe"],
        "faiss_ivfpq_refine": pq[0]["refine"],
        "faiss_ivfflat_p50_ms": round(flat_best[1], 4),
        "faiss_ivfflat_recall_at_100": flat_best[2],
        "faiss_ivfflat_nprobe": flat_best[0]["nprobe"],
    }


def run(args: argparse.Namespace, settings: Settings) -> dict:
    import faiss
    import torch

    from hir.cli.bench.quantizer import clustered_vectors
    from hir.models.index import InvertedIndex

    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    data = clustered_vectors(args.items + args.queries, args.dim, seed=args.seed)
    queries = torch.from_numpy(data[args.items:])
    quantizer, items, codes, bags, columns = _item_bags(torch.from_numpy(data[: args.items]), args)
    q_tokens, q_weights, query_bag_ms = _query_bags(queries, quantizer, codes, [int(c) for c in args.codes.split(",")], args.probes)
    rows, cols = bags.nonzero()
    n = items.shape[0]
    index = InvertedIndex.build(torch.from_numpy(rows), torch.from_numpy(columns[cols]), torch.from_numpy(bags[rows, cols].A1),
                                torch.arange(n), torch.zeros(n, dtype=torch.int64), ["item"])
    exact_ms, exact = _p50_ms(lambda i: (items @ queries[i]).topk(100).indices, queries)
    index_ms, found = _p50_ms(
        lambda i: index.search(q_tokens[i], q_weights[i], 100, query_vector=queries[i], vectors=items,
                               candidates=args.candidates)[0],
        queries,
    )
    recall = _recall(exact, found)
    return {
        "items": args.items,
        "index_p50_ms": round(index_ms, 4),
        "exact_p50_ms": round(exact_ms, 4),
        "speedup_vs_exact": round(exact_ms / index_ms, 2),
        "recall_at_100_vs_exact": recall,
        "query_bag_p50_ms": round(query_bag_ms, 4),
        **_faiss_at_recall(items.numpy(), queries.numpy(), exact, recall),
    }
