"""Quantizer error against faiss on the same vectors and code budget: `hir bench quantizer --json`.

The same vectors (clustered with a planted two-level hierarchy, or a real ``embeddings.parquet``)
are quantized with M codebooks of 2^nbits codewords by hir's hierarchical additive quantizer and
by faiss-cpu's ResidualQuantizer and LocalSearchQuantizer. Each is trained and evaluated on the
same set; the error is the mean over vectors of ``||x − x̂||²``.
``ratio_to_best_faiss`` = hir error / the better faiss error (≤ 1 means hir matches or beats faiss).
"""

from __future__ import annotations

import argparse

import numpy as np

from hir.settings import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=20_000, help="vectors (ignored with --embeddings)")
    parser.add_argument("--dim", type=int, default=64, help="dimension (ignored with --embeddings)")
    parser.add_argument("--codebooks", type=int, default=4, help="M codebooks")
    parser.add_argument("--nbits", type=int, default=8, help="bits per code (K = 2^nbits codewords)")
    parser.add_argument("--iterations", type=int, default=8, help="hir alternating rounds")
    parser.add_argument("--embeddings", help="an embeddings.parquet to quantize instead of clustered vectors")
    parser.add_argument("--threads", type=int, default=1, help="threads for torch and faiss alike")
    parser.add_argument("--seed", type=int, default=0)


def clustered_vectors(n: int, dim: int, coarse: int = 16, fine: int = 8, seed: int = 0) -> np.ndarray:
    """Unit vectors around ``coarse`` centres, each split into ``fine`` sub-centres, plus noise.

    ``x = normalise(c_a + 0.5·f_ab + 0.3·ε)`` with ``c, f, ε`` standard normal in ``dim`` dimensions,
    ``a`` uniform over the coarse clusters and ``b`` over their fine ones.
    """
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(coarse, dim))
    subs = rng.normal(size=(coarse, fine, dim)) * 0.5
    a, b = rng.integers(coarse, size=n), rng.integers(fine, size=n)
    x = centres[a] + subs[a, b] + 0.3 * rng.normal(size=(n, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _vectors(args: argparse.Namespace, settings: Settings) -> np.ndarray:
    if not args.embeddings:
        return clustered_vectors(args.n, args.dim, seed=args.seed)
    from hir.graph.sources.base import require_file
    from hir.tokens.bom import read_embeddings

    path = require_file(settings.resolve_path(args.embeddings, "--embeddings"), "embeddings")
    return np.ascontiguousarray(read_embeddings(path).vectors)


def _mse(x: np.ndarray, approx: np.ndarray) -> float:
    return float(((x - approx) ** 2).sum(1).mean())


def run(args: argparse.Namespace, settings: Settings) -> dict:
    import faiss
    import torch

    from hir.models.quantizer import HierarchicalQuantizer, QuantizerConfig

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    x = _vectors(args, settings)
    n, dim = x.shape
    config = QuantizerConfig(dim=dim, codes=[2**args.nbits] * args.codebooks, iterations=args.iterations, seed=args.seed)
    hir_q = HierarchicalQuantizer(config)
    codes, _ = hir_q.fit(torch.from_numpy(x))
    hir_mse = hir_q.mse(torch.from_numpy(x), codes)
    errors = {}
    for name, quantizer in (("rq", faiss.ResidualQuantizer(dim, args.codebooks, args.nbits)),
                            ("lsq", faiss.LocalSearchQuantizer(dim, args.codebooks, args.nbits))):
        quantizer.train(x)
        errors[name] = _mse(x, quantizer.decode(quantizer.compute_codes(x)))
    best = min(errors.values())
    return {
        "n": n,
        "dim": dim,
        "codebooks": args.codebooks,
        "codes": 2**args.nbits,
        "hir_mse": round(hir_mse, 6),
        "faiss_rq_mse": round(errors["rq"], 6),
        "faiss_lsq_mse": round(errors["lsq"], 6),
        "ratio_to_best_faiss": round(hir_mse / best, 4),
    }
