"""Hierarchical additive (composite) quantization: the codebooks behind Bag-of-Meaning tokens.

A vector is approximated by one codeword from each of ``M`` codebooks,

    x ≈ x̂ = Σ_m C_m[i_m],      C_m ∈ R^{K_m × d},  i_m ∈ {0 … K_m − 1},

with level 1 coarse (few codewords: interest clusters) and later levels finer. A token is a nested
prefix ``(level l, codes 1 … l)`` (:func:`token_ids`): a fine token implies its coarse one.

Training is the LSQ family of additive quantizers (Martinez et al., ECCV 2016/2018), which reaches
lower error than composite quantization's near-orthogonality penalty (Zhang et al., ICML 2014) on
the same code budget and needs no ε/μ tuning, because the decoder is the exact sum above:

1. **Residual k-means initialisation** — level m is k-means (k-means++ seeding) on the residual
   left by levels 1 … m−1, so level 1 is the coarse clustering and each later level refines it.
2. **Alternation** for ``iterations`` rounds, each step non-increasing in the error
   ``E = (1/N) Σ_n ||x_n − Σ_m C_m[i_nm]||²``:

   * codebook update: with the one-hot code matrix ``B ∈ {0,1}^{N × ΣK}``, all codebooks at once
     solve the ridge least squares ``C = (BᵀB + λI)⁻¹ BᵀX``;
   * code update: iterated conditional modes (ICM) — for each level in turn,
     ``i_m ← argmin_k ||r_m − C_m[k]||²`` with ``r_m = x − Σ_{m'≠m} C_m'[i_m']`` — followed by
     iterated local search: perturb ``perturb`` random levels of every code, run ICM again and keep
     the new code of each vector only where its error fell.

New vectors are encoded by beam search over the levels (residual order, ``beam`` partial codes per
vector) refined by ICM and local search. Everything is batched torch; checkpoints are safetensors
weights + a JSON config.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch


@dataclass
class QuantizerConfig:
    """Settings of a :class:`HierarchicalQuantizer`.

    Args:
        dim: vector dimension d.
        codes: codewords per level, coarse first (``len(codes)`` = M codebooks).
        iterations: alternating rounds (codebook least squares, then code update).
        icm_sweeps: ICM passes over all levels per code update.
        ils_rounds: local-search rounds (perturb + ICM, keep improvements) per code update.
        perturb: levels re-drawn at random per vector in each local-search round.
        beam: partial codes kept per vector by the beam-search encoder.
        kmeans_iterations: Lloyd iterations per level of the residual initialisation.
        ridge: λ of the codebook least squares (keeps BᵀB invertible when a code is unused).
        chunk: vectors processed at once by the encoder (bounds memory: chunk × beam × K floats).
        seed: random seed of initialisation and local search.
    """

    dim: int
    codes: list[int] = field(default_factory=lambda: [16, 64, 256])
    iterations: int = 8
    icm_sweeps: int = 2
    ils_rounds: int = 2
    perturb: int = 1
    beam: int = 8
    kmeans_iterations: int = 25
    ridge: float = 1e-3
    chunk: int = 4096
    seed: int = 0

    @property
    def levels(self) -> int:
        return len(self.codes)


def _sq_dist(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``[N, K]`` squared distances ``||x_n − c_k||²``."""
    return (x.square().sum(1, keepdim=True) - 2 * x @ c.T + c.square().sum(1)).clamp_min(0)


def kmeans(x: torch.Tensor, k: int, iterations: int, generator: torch.Generator) -> torch.Tensor:
    """Lloyd's k-means with k-means++ seeding; an emptied cluster is re-seeded at the worst-fit point.

    Args:
        x: ``[N, d]`` points. k: clusters. iterations: Lloyd steps. generator: seeds the sampling.
    Returns:
        ``[k, d]`` centroids.
    """
    n = x.shape[0]
    centroids = x[torch.randint(n, (1,), generator=generator, device="cpu").to(x.device)]
    nearest = _sq_dist(x, centroids).squeeze(1)
    for _ in range(1, k):
        probs = (nearest / nearest.sum().clamp_min(1e-12)).cpu() if nearest.sum() > 0 else torch.ones(n)
        pick = torch.multinomial(probs, 1, generator=generator).to(x.device)
        centroids = torch.cat([centroids, x[pick]])
        nearest = torch.minimum(nearest, _sq_dist(x, x[pick]).squeeze(1))
    for _ in range(iterations):
        dist = _sq_dist(x, centroids)
        assign = dist.argmin(1)
        counts = torch.bincount(assign, minlength=k).to(x.dtype)
        sums = torch.zeros_like(centroids).index_add_(0, assign, x)
        empty = counts == 0
        centroids = torch.where(empty[:, None], centroids, sums / counts.clamp_min(1)[:, None])
        if empty.any():
            worst = dist.gather(1, assign[:, None]).squeeze(1).topk(int(empty.sum())).indices
            centroids[empty] = x[worst]
    return centroids


class HierarchicalQuantizer:
    """M additive codebooks, coarse to fine; see the module docstring for the maths."""

    def __init__(self, config: QuantizerConfig, codebooks: list[torch.Tensor] | None = None):
        self.config = config
        self.codebooks = codebooks or [torch.zeros(k, config.dim) for k in config.codes]

    # ----------------------------------------------------------------- decoding and error
    def decode(self, codes: torch.Tensor, levels: int | None = None) -> torch.Tensor:
        """``Σ_{m<levels} C_m[codes[:, m]]`` for ``codes`` ``[N, M]`` (all levels by default)."""
        levels = self.config.levels if levels is None else levels
        out = torch.zeros(codes.shape[0], self.config.dim, dtype=self.codebooks[0].dtype, device=codes.device)
        for m in range(levels):
            out += self.codebooks[m][codes[:, m]]
        return out

    def mse(self, x: torch.Tensor, codes: torch.Tensor) -> float:
        """Mean over vectors of the squared reconstruction error ``||x − x̂||²``."""
        return float((x - self.decode(codes)).square().sum(1).mean())

    def mse_per_level(self, x: torch.Tensor, codes: torch.Tensor) -> list[float]:
        """Error using levels 1 … l for l = 1 … M.

        Levels after l are replaced by their usage-weighted mean codeword μ_m (the best constant
        in their place), so entry l is ``mean ||x − Σ_{m≤l} C_m[i_m] − Σ_{m>l} μ_m||²``.
        """
        means = [self.codebooks[m][codes[:, m]].mean(0) for m in range(self.config.levels)]
        out = []
        for level in range(1, self.config.levels + 1):
            approx = self.decode(codes, level) + sum(means[level:], torch.zeros_like(means[0]))
            out.append(float((x - approx).square().sum(1).mean()))
        return out

    def usage(self, codes: torch.Tensor) -> list[dict[str, float]]:
        """Per level: share of codewords used, share of vectors on the most used code, perplexity."""
        stats = []
        for m, k in enumerate(self.config.codes):
            counts = torch.bincount(codes[:, m].cpu(), minlength=k).double()
            p = counts / counts.sum().clamp_min(1)
            entropy = -(p[p > 0] * p[p > 0].log()).sum()
            stats.append({
                "level": m + 1,
                "codewords": k,
                "used": float((counts > 0).double().mean()),
                "top_share": float(p.max()),
                "perplexity": float(entropy.exp()),
            })
        return stats

    # ----------------------------------------------------------------- encoding
    def _icm(self, x: torch.Tensor, codes: torch.Tensor, sweeps: int) -> torch.Tensor:
        """ICM: each level in turn takes the codeword nearest to the residual of the others."""
        codes = codes.clone()
        recon = self.decode(codes)
        for _ in range(sweeps):
            for m, book in enumerate(self.codebooks):
                rest = recon - book[codes[:, m]]
                codes[:, m] = _sq_dist(x - rest, book).argmin(1)
                recon = rest + book[codes[:, m]]
        return codes

    def _local_search(self, x: torch.Tensor, codes: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """ICM, then ``ils_rounds`` of: perturb random levels, ICM, keep each vector's better code."""
        cfg = self.config
        codes = self._icm(x, codes, cfg.icm_sweeps)
        err = (x - self.decode(codes)).square().sum(1)
        for _ in range(cfg.ils_rounds if cfg.perturb > 0 else 0):
            trial = codes.clone()
            n = x.shape[0]
            for _ in range(cfg.perturb):
                level = torch.randint(cfg.levels, (n,), generator=generator).to(x.device)
                for m, k in enumerate(cfg.codes):
                    pick = level == m
                    trial[pick, m] = torch.randint(k, (int(pick.sum()),), generator=generator).to(x.device)
            trial = self._icm(x, trial, cfg.icm_sweeps)
            trial_err = (x - self.decode(trial)).square().sum(1)
            better = trial_err < err
            codes[better], err = trial[better], torch.minimum(err, trial_err)
        return codes

    def _beam(self, x: torch.Tensor) -> torch.Tensor:
        """Beam search in level order: keep the ``beam`` best partial codes per vector."""
        n, beam = x.shape[0], self.config.beam
        residual = x[:, None, :]  # [n, b, d]
        codes = torch.zeros(n, 1, 0, dtype=torch.int64, device=x.device)
        for book in self.codebooks:
            b, k = residual.shape[1], book.shape[0]
            dist = _sq_dist(residual.reshape(n * b, -1), book).reshape(n, b * k)
            best = dist.topk(min(beam, b * k), dim=1, largest=False).indices
            parent, code = best // k, best % k
            codes = torch.cat([codes.gather(1, parent[..., None].expand(-1, -1, codes.shape[2])), code[..., None]], 2)
            residual = residual.gather(1, parent[..., None].expand(-1, -1, x.shape[1])) - book[code]
        return codes[:, 0, :]

    @torch.no_grad()
    def encode(self, x: torch.Tensor, init: torch.Tensor | None = None) -> torch.Tensor:
        """Codes ``[N, M]`` (int64) of ``x`` ``[N, d]``: beam search (or ``init``), then ICM + local search."""
        generator = torch.Generator().manual_seed(self.config.seed + 1)
        x = x.to(self.codebooks[0])
        out = []
        for start in range(0, x.shape[0], self.config.chunk):
            part = x[start:start + self.config.chunk]
            codes = self._beam(part) if init is None else init[start:start + self.config.chunk].to(x.device)
            out.append(self._local_search(part, codes, generator))
        return torch.cat(out) if out else torch.zeros(0, self.config.levels, dtype=torch.int64)

    # ----------------------------------------------------------------- training
    def _least_squares(self, x: torch.Tensor, codes: torch.Tensor) -> None:
        """All codebooks at once: ``C = (BᵀB + λI)⁻¹ BᵀX`` with B the one-hot codes."""
        sizes = torch.tensor(self.config.codes, device=x.device)
        offsets = torch.cumsum(sizes, 0) - sizes
        total = int(sizes.sum())
        cols = codes + offsets  # [N, M] column of B set for each level
        pairs = (cols[:, :, None] * total + cols[:, None, :]).reshape(-1)
        gram = torch.bincount(pairs, minlength=total * total).reshape(total, total).to(x.dtype)
        gram += self.config.ridge * torch.eye(total, dtype=x.dtype, device=x.device)
        rhs = torch.zeros(total, x.shape[1], dtype=x.dtype, device=x.device)
        for m in range(self.config.levels):
            rhs.index_add_(0, cols[:, m], x)
        solution = torch.linalg.solve(gram.double(), rhs.double()).to(x.dtype)
        self.codebooks = list(solution.split(self.config.codes))

    @torch.no_grad()
    def fit(self, x: torch.Tensor) -> tuple[torch.Tensor, list[float]]:
        """Train on ``x`` ``[N, d]``; returns the codes of ``x`` and the error after each round.

        The first entry of the history is the error of the residual k-means initialisation.
        """
        cfg = self.config
        generator = torch.Generator().manual_seed(cfg.seed)
        x = x.float()
        residual, books, codes = x.clone(), [], []
        for k in cfg.codes:
            book = kmeans(residual, min(k, x.shape[0]), cfg.kmeans_iterations, generator)
            if book.shape[0] < k:
                book = torch.cat([book, book[:1].expand(k - book.shape[0], -1)])
            assign = _sq_dist(residual, book).argmin(1)
            residual -= book[assign]
            books.append(book)
            codes.append(assign)
        self.codebooks, codes = books, torch.stack(codes, 1)
        history = [self.mse(x, codes)]
        for _ in range(cfg.iterations):
            self._least_squares(x, codes)
            codes = self.encode(x, init=codes)
            history.append(self.mse(x, codes))
        return codes, history

    # ----------------------------------------------------------------- checkpoints
    def save(self, folder: str | Path) -> None:
        """Write ``codebooks.safetensors`` and ``config.json`` into ``folder`` (which must exist)."""
        from safetensors.torch import save_file

        folder = Path(folder)
        save_file({f"level_{m}": c.contiguous().cpu() for m, c in enumerate(self.codebooks)}, str(folder / "codebooks.safetensors"))
        (folder / "config.json").write_text(json.dumps(asdict(self.config), indent=2))

    @classmethod
    def load(cls, folder: str | Path, device: str | torch.device = "cpu") -> "HierarchicalQuantizer":
        """Read a quantizer written by :meth:`save`."""
        from safetensors.torch import load_file

        folder = Path(folder)
        config = QuantizerConfig(**json.loads((folder / "config.json").read_text()))
        tensors = load_file(str(folder / "codebooks.safetensors"), device=str(device))
        return cls(config, [tensors[f"level_{m}"] for m in range(config.levels)])


TOKEN_LEVEL_STRIDE = 1_000_000_000


def prefix_paths(codes: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """Nested prefix paths ``[N, M]``: column l is the mixed-radix number of codes ``1 … l``.

    ``p_1 = i_1`` and ``p_l = p_{l−1} · K_l + i_l``, so two vectors share the path at level l exactly
    when they share the codes of levels 1 … l, and a path at level l determines every coarser one
    (``p_{l−1} = p_l // K_l``).

    Args:
        codes: ``[N, M]`` codes, level 1 first. sizes: ``K_1 … K_M``, codewords per level.
    """
    paths = codes.clone().long()
    for m in range(1, codes.shape[1]):
        paths[:, m] = paths[:, m - 1] * sizes[m] + codes[:, m]
    return paths


def token_ids(codes: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """Nested tokens ``level · 1e9 + path`` (:func:`prefix_paths`) of codes ``[N, M]``, level 1 coarse.

    A fine token implies its coarse token: the token of level l names the whole path of codes
    ``1 … l``. Paths must stay below ``TOKEN_LEVEL_STRIDE`` (``Π K_l < 1e9``).
    """
    if torch.tensor(sizes, dtype=torch.float64).prod() >= TOKEN_LEVEL_STRIDE:
        raise ValueError(f"codewords per level {sizes}: their product must stay below {TOKEN_LEVEL_STRIDE}")
    levels = torch.arange(1, codes.shape[1] + 1, device=codes.device) * TOKEN_LEVEL_STRIDE
    return prefix_paths(codes, sizes) + levels


def split_token(token: int) -> tuple[int, int]:
    """``(level, path)`` of a token id (level 1 = coarse)."""
    return int(token) // TOKEN_LEVEL_STRIDE, int(token) % TOKEN_LEVEL_STRIDE

