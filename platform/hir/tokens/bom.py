"""Bag-of-Meaning tokens: the shared code behind the token assets and ``hir retrieve`` / ``hir tokens``.

Codes. Each type's embeddings are unit-normalised, centred on the type's mean and normalised again,
``x' = normalise(x̂ − μ_type)`` (so the first codebook is not spent on the offset between types),
then quantized (:mod:`hir.models.quantizer`). An entity's own tokens are its nested prefixes, one per
level: ``level · 1e9 + path(codes 1 … l)`` (:func:`~hir.models.quantizer.token_ids`).

Bags (DESIGN §8). With ``a = bom_own_weight``, every entity's token mass is

    m_t(e) = a · own_t(e) + (1 − a) · mix_t(e),

the same for every kind, ``mix`` empty where there is nothing to mix:

* a user: ``mix`` = the own tokens of its ``bom_interests`` most engaged non-user neighbours, each
  weighted by its share of the user's decayed edge weight (so it sums to 1 per level);
* an ad, campaign, advertiser or product: ``mix`` = the own tokens of the users engaging with it
  weighted by their share of its decayed weight. An entity without engaged users (an advertiser
  above its campaigns) takes ``mix`` from its non-user graph neighbours', up to two hops.

Each bag keeps its ``bom_tokens_per_level`` heaviest tokens per level; their weights are BM25-like,

    w_t(e) = idf(t) · m (k₁ + 1) / (m + k₁),   idf(t) = log(N / df(t)),

``df(t)`` the bags holding ``t`` among the ``N`` bags (a token every bag holds weighs 0) and
``k₁`` = :data:`SATURATION`; each bag is then scaled to unit L2 norm, so every bag, of whatever
kind and however much it mixed, lives on the same scale, and the overlap ``Σ_t w_t(u) w_t(i)`` is
the cosine of the two bags. Retrieval scores ``overlap / τ + log(1 + p_i)`` (:func:`bag_temperature`
fits ``τ``; ``p_i`` the item's decayed engagement), as the dense scorer scores
``cos / T + log(1 + p_i)``.

Query bags. A query (a user asking for items) does not use its own bag, which holds its own path and
so reaches only the items of its own cell: it probes the ``bom_query_probes`` finest tokens of the
target type nearest its embedding by the dense scorer's cosine (:func:`query_bags`,
:func:`path_directions`, :class:`QueryProbe`), as an IVF probes its nearest lists; its overlap with
the items' own bags then ranks them, with its own ``τ`` (:func:`query_temperature`). The index ranks
only the items a query's tokens reach (:class:`~hir.models.index.InvertedIndex`), and so does the
evaluation's ``hir_bom``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from hir.errors import SettingsError
from hir.models.quantizer import TOKEN_LEVEL_STRIDE
from hir.settings import Settings
from hir.storage import Artifacts

SERVING_TYPES = ("ad", "campaign", "advertiser", "product")
DESCRIPTION_TYPES = ("category", "genre")
SATURATION = 1.2  # k₁ of the BM25-like saturation of token mass
QUERY_FLOOR = 1e-3  # ε: the weight of a query bag's last probed token (:func:`query_bags`)
QUERY_CHUNK = 1024  # queries scored at once in query_bags: its scores and their ranks, not n × paths, stay in memory


def codes_setting(settings: Settings) -> list[int]:
    """``bom_codes`` (``"16,64,256,256"``) as codewords per level; a clear error when malformed."""
    try:
        codes = [int(p) for p in settings.bom_codes.split(",") if p.strip()]
    except ValueError:
        codes = []
    if not codes or min(codes) < 2:
        raise SettingsError(f"HIR_BOM_CODES={settings.bom_codes!r}: expected comma-separated integers ≥ 2, e.g. 16,64,256")
    return codes


def written_partition(catalogue: Artifacts, asset: str, partition: str | None) -> str:
    """``partition`` of ``asset``, the newest written one when None; a clear error where it is absent."""
    chosen = catalogue.latest(asset) if partition is None else partition
    if chosen is None:
        raise SettingsError(f"no {asset} partition under {catalogue.root / asset}; run `hir run` first")
    if not catalogue.folder(asset, chosen).is_dir():
        raise SettingsError(f"{asset} partition {chosen!r} does not exist under {catalogue.root / asset}")
    return chosen


# ----------------------------------------------------------------------------- embeddings and codes
@dataclass
class Embeddings:
    """The rows of an ``embeddings.parquet``: ids, types, keys and the ``[N, d]`` float32 matrix."""

    entity_id: np.ndarray
    entity_type: np.ndarray
    source_key: np.ndarray
    vectors: np.ndarray


def read_embeddings(path: Path) -> Embeddings:
    """Read ``entity_embeddings/<D>/embeddings.parquet`` (schema in HELPERS/DESIGN)."""
    table = pq.read_table(path, columns=["entity_id", "entity_type", "source_key", "embedding"])
    column = table.column("embedding").combine_chunks()
    dim = column.type.list_size
    vectors = column.flatten().to_numpy(zero_copy_only=False).astype(np.float32).reshape(-1, dim)
    return Embeddings(
        entity_id=table.column("entity_id").to_numpy().astype(np.int64),
        entity_type=np.asarray(table.column("entity_type").to_pylist(), dtype=object),
        source_key=np.asarray(table.column("source_key").to_pylist(), dtype=object),
        vectors=vectors,
    )


def _unit(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (zero rows stay zero)."""
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def centre(vectors: np.ndarray, mean) -> np.ndarray:
    """``normalise(x̂ − μ)`` with ``x̂ = x / ||x||``: rows placed as the quantizer saw their type."""
    unit = _unit(vectors)
    return _unit(unit - np.asarray(mean, dtype=unit.dtype))


def centre_per_type(vectors: np.ndarray, types: np.ndarray) -> tuple[np.ndarray, dict[str, list[float]]]:
    """:func:`centre` of each type's rows on ``μ_type``, the mean unit row ``x̂`` of the type.

    Returns the centred rows and ``{type: μ_type}`` (to centre new entities the same way).
    """
    unit = _unit(vectors)
    out, means = np.empty_like(unit), {}
    for kind in np.unique(types):
        rows = types == kind
        means[str(kind)] = unit[rows].mean(0)
        out[rows] = centre(unit[rows], means[str(kind)])
    return out, {k: v.astype(float).tolist() for k, v in means.items()}


def train_quantizer(emb: Embeddings, settings: Settings, device: "torch.device | str" = "cpu"):  # noqa: F821
    """Train on a seeded sample of ``bom_train_sample`` centred embeddings (:func:`centre_per_type`),
    then encode them all.

    Returns ``(quantizer, codes [N, M] numpy, report)``; the report holds ``mse_per_level`` (mean
    squared error with levels 1 … l, over all rows, of the centred unit vectors), ``relative_mse``
    (error / mean ``||x'||²`` = 1), ``history`` (training error per round), ``usage`` per level and
    ``type_means`` (``μ_type``).
    """
    import torch

    from hir.models.quantizer import HierarchicalQuantizer, QuantizerConfig

    if emb.vectors.shape[0] == 0:
        raise SettingsError("entity_embeddings holds no rows; nothing to quantize")
    centred, means = centre_per_type(emb.vectors, emb.entity_type)
    x = torch.from_numpy(centred).to(device)
    generator = torch.Generator().manual_seed(settings.seed)
    sample = torch.randperm(x.shape[0], generator=generator)[: settings.bom_train_sample].to(device)
    config = QuantizerConfig(dim=x.shape[1], codes=codes_setting(settings), iterations=settings.bom_iterations, seed=settings.seed)
    quantizer = HierarchicalQuantizer(config)
    _, history = quantizer.fit(x[sample])
    codes = quantizer.encode(x)
    mse = quantizer.mse_per_level(x, codes)
    report = {
        "mse_per_level": mse,
        "relative_mse": mse[-1] / max(float(x.square().sum(1).mean()), 1e-12),
        "history": history,
        "usage": quantizer.usage(codes),
        "train_rows": int(sample.numel()),
        "type_means": means,
    }
    return quantizer, codes.cpu().numpy(), report


def codes_table(emb: Embeddings, codes: np.ndarray) -> pa.Table:
    """``codes.parquet``: entity_id, entity_type, source_key and one ``code_<level>`` INT32 column per level."""
    columns = {
        "entity_id": pa.array(emb.entity_id, pa.int64()),
        "entity_type": pa.array(emb.entity_type.tolist(), pa.string()),
        "source_key": pa.array(emb.source_key.tolist(), pa.string()),
    }
    for m in range(codes.shape[1]):
        columns[f"code_{m + 1}"] = pa.array(codes[:, m].astype(np.int32), pa.int32())
    return pa.table(columns)


def read_codes(path: Path) -> tuple[Embeddings, np.ndarray]:
    """Rows (without vectors) and ``[N, M]`` codes of a ``codes.parquet``."""
    table = pq.read_table(path)
    levels = sorted((c for c in table.column_names if c.startswith("code_")), key=lambda c: int(c[5:]))
    emb = Embeddings(
        entity_id=table.column("entity_id").to_numpy().astype(np.int64),
        entity_type=np.asarray(table.column("entity_type").to_pylist(), dtype=object),
        source_key=np.asarray(table.column("source_key").to_pylist(), dtype=object),
        vectors=np.zeros((table.num_rows, 0), np.float32),
    )
    codes = np.stack([table.column(c).to_numpy().astype(np.int64) for c in levels], axis=1)
    return emb, codes


# ----------------------------------------------------------------------------- bags
def _row_normalise(matrix):
    """Scale each row of a scipy sparse matrix to sum 1 (empty rows stay empty)."""
    import scipy.sparse as sp

    sums = np.asarray(matrix.sum(axis=1)).ravel()
    return sp.diags(np.where(sums > 0, 1.0 / np.where(sums > 0, sums, 1.0), 0.0)) @ matrix


def _top_per_row(matrix, n: int):
    """Keep the ``n`` largest entries of each row of a CSR matrix."""
    import scipy.sparse as sp

    coo = matrix.tocoo()
    order = np.lexsort((-coo.data, coo.row))
    row, col, data = coo.row[order], coo.col[order], coo.data[order]
    first = np.searchsorted(row, row, side="left")
    keep = np.arange(row.size) - first < n
    return sp.csr_matrix((data[keep], (row[keep], col[keep])), shape=matrix.shape)


def engagement_matrix(emb: Embeddings, nodes: pa.Table, edges: pa.Table):
    """Symmetric ``[N, N]`` decayed edge weights between embedding rows, from a graph snapshot.

    ``nodes.parquet`` row i is node i with warehouse ``entity_id``; ``edges.parquet`` holds
    ``src, dst`` node indices and ``weight``. Edges whose endpoints have no embedding are left out.
    """
    import scipy.sparse as sp

    n = emb.entity_id.size
    node_ids = nodes.column("entity_id").to_numpy().astype(np.int64)
    order = np.argsort(emb.entity_id)
    slot = np.searchsorted(emb.entity_id[order], node_ids).clip(0, max(n - 1, 0))
    node_row = np.where(emb.entity_id[order][slot] == node_ids, order[slot], -1) if n else np.full(node_ids.size, -1)
    src = node_row[edges.column("src").to_numpy().astype(np.int64)]
    dst = node_row[edges.column("dst").to_numpy().astype(np.int64)]
    weight = edges.column("weight").to_numpy().astype(np.float64)
    ok = (src >= 0) & (dst >= 0) & (src != dst)
    src, dst, weight = src[ok], dst[ok], weight[ok]
    matrix = sp.coo_matrix((np.r_[weight, weight], (np.r_[src, dst], np.r_[dst, src])), shape=(n, n))
    return matrix.tocsr()


def mixtures(emb: Embeddings, own, engagement, interests: int):
    """``[N, T]`` ``mix`` of the module docstring: interests of users, served interests of the rest.

    Args:
        emb: the embedding rows. own: ``[N, T]`` CSR, 1 on each row's own tokens.
        engagement: ``[N, N]`` symmetric decayed weights (:func:`engagement_matrix`).
        interests: neighbours a user's interests are taken from (its most engaged).
    """
    import scipy.sparse as sp

    is_user = emb.entity_type == "user"
    serving = np.isin(emb.entity_type, SERVING_TYPES)
    user_diag, other_diag = sp.diags(is_user.astype(float)), sp.diags((~is_user).astype(float))
    liked = _row_normalise(_top_per_row((user_diag @ engagement @ other_diag).tocsr(), interests)) @ own
    served = _row_normalise(sp.diags(serving.astype(float)) @ engagement.T.tocsr() @ user_diag) @ own
    structural = _row_normalise(other_diag @ engagement @ other_diag)
    for _ in range(2):
        missing = serving & (np.asarray(served.sum(axis=1)).ravel() == 0)
        served = served + sp.diags(missing.astype(float)) @ _row_normalise(structural @ served)
    return (liked + served).tocsr()


def bag_weights(mass):
    """BM25-like unit-norm weights of a ``[N, T]`` CSR token mass (see the module docstring).

    ``w_t(e) = idf(t) · m (k₁ + 1) / (m + k₁)`` with ``idf(t) = log(N / df(t))``, then each row is
    scaled to unit L2 norm (a row of tokens every bag holds stays empty).
    """
    import scipy.sparse as sp

    mass = mass.tocsr()
    mass.eliminate_zeros()
    df = np.bincount(mass.indices, minlength=mass.shape[1])
    idf = np.log(max(mass.shape[0], 1) / np.maximum(df, 1))
    weights = mass.copy()
    weights.data = weights.data * (SATURATION + 1) / (weights.data + SATURATION) * idf[weights.indices]
    norms = np.sqrt(np.asarray(weights.multiply(weights).sum(axis=1)).ravel())
    weights = sp.diags(np.where(norms > 0, 1.0 / np.where(norms > 0, norms, 1.0), 0.0)) @ weights
    weights = weights.tocsr()
    weights.eliminate_zeros()
    return weights


def build_bags(emb: Embeddings, tokens: np.ndarray, engagement, settings: Settings):
    """Bag matrix ``[N, T]`` (scipy CSR) over the distinct tokens; see the module docstring.

    Args:
        emb: the embedding rows. tokens: ``[N, M]`` own nested tokens of those rows.
        engagement: ``[N, N]`` symmetric decayed weights (:func:`engagement_matrix`).
        settings: ``bom_interests``, ``bom_own_weight``, ``bom_tokens_per_level``.
    Returns:
        (bags, token_of_column): the unit-norm weights and the token id of each column.
    """
    import scipy.sparse as sp

    n, levels = tokens.shape
    token_of_column, column = np.unique(tokens, return_inverse=True)
    own = sp.csr_matrix((np.ones(n * levels), (np.repeat(np.arange(n), levels), column.ravel())),
                        shape=(n, token_of_column.size))
    a = settings.bom_own_weight
    mass = a * own + (1.0 - a) * mixtures(emb, own, engagement, settings.bom_interests)
    bounds = np.searchsorted(token_of_column, np.arange(1, levels + 2) * TOKEN_LEVEL_STRIDE)
    kept = sp.hstack([_top_per_row(mass[:, lo:hi], settings.bom_tokens_per_level) for lo, hi in zip(bounds, bounds[1:])])
    return bag_weights(kept), token_of_column


def bag_temperature(vectors: np.ndarray, bags, types: np.ndarray, temperature: float,
                    users: int = 256, items: int = 4096, seed: int = 0) -> float:
    """``τ`` that puts the bags' overlap on the embedding score's scale: ``τ = T / β``.

    ``β`` is the least-squares slope of the embedding cosine ``cos(u, i)`` on the bag overlap
    ``o(u, i) = Σ_t w_t(u) w_t(i)`` over a seeded sample of ``users`` users × ``items`` entities of
    :data:`SERVING_TYPES`, both centred per user (a ranking ignores a user's own offset):
    ``β = Σ (o − ō_u)(c − c̄_u) / Σ (o − ō_u)²``. So ``o / τ`` stands in for ``cos / T`` beside the same
    log prior. ``T`` is the encoder's InfoNCE temperature; ``T`` itself when the sample is empty or
    the overlap does not vary.
    """
    rng = np.random.default_rng(seed)
    user_rows, item_rows = np.flatnonzero(types == "user"), np.flatnonzero(np.isin(types, SERVING_TYPES))
    if not user_rows.size or not item_rows.size:
        return float(temperature)
    u = rng.choice(user_rows, min(users, user_rows.size), replace=False)
    i = rng.choice(item_rows, min(items, item_rows.size), replace=False)
    unit = _unit(vectors)
    return overlap_temperature(unit[u] @ unit[i].T, (bags[u] @ bags[i].T).toarray(), temperature)


def overlap_temperature(cos: np.ndarray, overlap: np.ndarray, temperature: float) -> float:
    """``τ = T / β``, ``β`` the least-squares slope of ``cos`` on ``overlap`` (``[users, items]``),
    both centred per user; ``T`` itself when the overlap does not vary or the slope is not positive."""
    cos, overlap = cos - cos.mean(1, keepdims=True), overlap - overlap.mean(1, keepdims=True)
    spread = float((overlap * overlap).sum())
    slope = float((overlap * cos).sum()) / spread if spread > 0 else 0.0
    return float(temperature / slope) if slope > 0 else float(temperature)


def type_paths(quantizer, codes: np.ndarray, types: np.ndarray, wanted: str, sizes: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The finest tokens of the entities of type ``wanted`` and their reconstructions.

    Returns ``(tokens [P], centres [P, d])``: each distinct finest token (path of every level's code)
    held by a ``wanted`` row of ``codes`` (``[N, M]``, rows typed by ``types``) and its point
    ``Σ_m C_m[i_m]`` in the quantised (centred) space.
    """
    import torch

    from hir.models.quantizer import token_ids

    rows = np.flatnonzero(types == wanted)
    finest = token_ids(torch.from_numpy(codes[rows]), sizes)[:, -1].numpy()
    tokens, first = np.unique(finest, return_index=True)
    return tokens, quantizer.decode(torch.from_numpy(codes[rows[first]])).numpy()


def query_bags(queries: np.ndarray, tokens: np.ndarray, centres: np.ndarray, probes: int) -> tuple[np.ndarray, np.ndarray]:
    """Query bags for retrieval: each query's ``probes`` finest tokens nearest it (multi-probe).

    A query ``x`` holds the finest tokens ``p`` of the target type with the highest ``s_p = ⟨x, c_p⟩``,
    ``c_p`` the path's point (:class:`QueryProbe` passes unit queries and :func:`path_directions`, so
    ``s_p`` is the dense scorer's cosine), weighted ``s_p − s_(probes) + ε``: an IVF's probe of its
    nearest lists, as tokens, so that overlap with an item's bag ranks the items of those lists by how
    near their path is, and the matched tokens explain it. A user's own bag (its own path) only
    reaches the items of its own cell.

    Args:
        queries: ``[n, d]`` query vectors. tokens, centres: the target type's finest tokens and their
            points. probes: tokens per query (all when fewer exist).
    Returns:
        ``(tokens [n, P], weights [n, P])``, best first, ``P = min(probes, len(tokens))``.
    """
    queries, centres = np.asarray(queries, np.float32), np.asarray(centres, np.float32)
    kept = min(probes, tokens.size)
    if kept == 0 or len(queries) == 0:
        return np.zeros((len(queries), kept), np.int64), np.zeros((len(queries), kept), np.float32)
    parts = [_nearest_paths(queries[i:i + QUERY_CHUNK], tokens, centres, kept) for i in range(0, len(queries), QUERY_CHUNK)]
    return np.concatenate([t for t, _ in parts]), np.concatenate([w for _, w in parts])


def _nearest_paths(queries: np.ndarray, tokens: np.ndarray, centres: np.ndarray, kept: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`query_bags` of one chunk of queries (``kept`` ≥ 1 tokens each)."""
    scores = queries @ centres.T
    best = np.argpartition(-scores, kept - 1, axis=1)[:, :kept] if kept < tokens.size else np.tile(np.arange(kept), (scores.shape[0], 1))
    values = np.take_along_axis(scores, best, 1)
    order = np.argsort(-values, axis=1, kind="stable")
    best, values = np.take_along_axis(best, order, 1), np.take_along_axis(values, order, 1)
    return tokens[best], (values - values[:, -1:] + QUERY_FLOOR).astype(np.float32)


def path_directions(centres: np.ndarray, mean) -> np.ndarray:
    """The unit item direction of each path: ``normalise(μ + ρ c_p)``, ``ρ = √(1 − ||μ||²)``.

    The quantizer encodes a unit item ``x̂`` of a type as ``x' = normalise(x̂ − μ)`` (:func:`centre`),
    so ``x̂ = μ + r x'`` with ``r = ||x̂ − μ||``, which the codes do not keep. Since ``μ`` is the mean of
    the type's ``x̂``, the mean of ``r²`` over the type is ``1 − ||μ||²`` exactly; ``ρ`` is that RMS
    radius. A query scored against these directions by cosine ranks paths as the dense scorer ranks
    their items (``cos(u, i)``); scored against the centred ``c_p`` it would add ``−⟨μ_query, c_p⟩``,
    a bias by path, and ignore the type's offset.

    Args:
        centres: ``[P, d]`` path reconstructions in the centred space (:func:`type_paths`).
        mean: ``μ`` of the paths' type (``d`` floats).
    """
    mu = np.asarray(mean, np.float32)
    return _unit(mu + np.sqrt(max(1.0 - float(mu @ mu), 0.0)) * np.asarray(centres, np.float32))


@dataclass
class QueryProbe:
    """What query bags are made of in one partition (:func:`query_bags`): its quantizer, every
    quantised row's codes and type, and each type's mean (:func:`centre_per_type`)."""

    quantizer: "HierarchicalQuantizer"  # noqa: F821
    codes: np.ndarray
    types: np.ndarray
    means: dict[str, list[float]]
    _paths: dict = field(default_factory=dict, repr=False)  # target type -> type_paths(...), made once

    def bags(self, vectors: np.ndarray, query_type: str, target_type: str, probes: int) -> tuple[np.ndarray, np.ndarray]:
        """Query bags of ``vectors`` (embeddings of ``query_type`` entities) over the finest tokens of
        ``target_type``: ``(tokens [n, P], weights [n, P])``, each path scored by the cosine of the
        query with the path's item direction (:func:`path_directions`), the dense scorer's ``cos(u, i)``."""
        for kind in (query_type, target_type):
            if kind not in self.means:
                raise SettingsError(f"the quantizer saw no {kind!r} entities; types: {', '.join(sorted(self.means))}")
        if target_type not in self._paths:
            tokens, centres = type_paths(self.quantizer, self.codes, self.types, target_type, self.quantizer.config.codes)
            self._paths[target_type] = tokens, path_directions(centres, self.means[target_type])
        tokens, directions = self._paths[target_type]
        return query_bags(_unit(np.asarray(vectors, np.float32)), tokens, directions, probes)

    def matrix(self, vectors: np.ndarray, query_type: str, target_type: str, probes: int, token_of_column: np.ndarray):
        """:meth:`bags` as a ``[n, T]`` CSR over the columns ``token_of_column`` (sorted token ids);
        tokens outside them and rows whose vector is all zero (no embedding) are left out."""
        import scipy.sparse as sp

        vectors = np.asarray(vectors, np.float32)
        tokens, weights = self.bags(vectors, query_type, target_type, probes)
        slot = np.searchsorted(token_of_column, tokens.ravel()).clip(0, max(token_of_column.size - 1, 0))
        known = (token_of_column[slot] == tokens.ravel()) if token_of_column.size else np.zeros(tokens.size, bool)
        known &= np.repeat(np.abs(vectors).sum(1) > 0, tokens.shape[1])
        rows = np.repeat(np.arange(tokens.shape[0]), tokens.shape[1])
        return sp.csr_matrix((weights.ravel()[known], (rows[known], slot[known])), shape=(tokens.shape[0], token_of_column.size))


def load_probe(folder: Path) -> QueryProbe | None:
    """The :class:`QueryProbe` of a ``bom_quantizer`` partition folder, ``None`` where it is not written."""
    import json

    from hir.models.quantizer import HierarchicalQuantizer
    from hir.storage import CODES_FILE, QUANTIZER_REPORT_FILE

    if not (folder / CODES_FILE).exists() or not (folder / QUANTIZER_REPORT_FILE).exists():
        return None
    emb, codes = read_codes(folder / CODES_FILE)
    means = json.loads((folder / QUANTIZER_REPORT_FILE).read_text(encoding="utf-8"))["type_means"]
    return QueryProbe(HierarchicalQuantizer.load(folder), codes, emb.entity_type, means)


def query_temperature(probe: QueryProbe, vectors: np.ndarray, types: np.ndarray, bags, token_of_column: np.ndarray,
                      temperature: float, probes: int, users: int = 256, seed: int = 0) -> float:
    """``τ`` of query bags (:meth:`QueryProbe.matrix`) against the entities' own bags, as
    :func:`bag_temperature` fits the own bags': :func:`overlap_temperature` over a seeded sample of
    ``users`` users × every entity of :data:`SERVING_TYPES` (each type probed with its own tokens)."""
    user_rows = np.flatnonzero(types == "user")
    kinds = [kind for kind in SERVING_TYPES if (types == kind).any()]
    if not user_rows.size or not kinds or "user" not in probe.means:
        return float(temperature)
    u = np.random.default_rng(seed).choice(user_rows, min(users, user_rows.size), replace=False)
    unit = _unit(vectors)
    cos, overlap = [], []
    for kind in kinds:
        items = np.flatnonzero(types == kind)
        cos.append(unit[u] @ unit[items].T)
        overlap.append((probe.matrix(vectors[u], "user", kind, probes, token_of_column) @ bags[items].T).toarray())
    return overlap_temperature(np.hstack(cos), np.hstack(overlap), temperature)


def log_prior(emb: Embeddings, engagement) -> np.ndarray:
    """``log(1 + p_e)`` per row, ``p_e`` the decayed weight of the row's edges with users."""
    is_user = (emb.entity_type == "user").astype(float)
    return np.log1p(np.asarray(engagement @ is_user).ravel()).astype(np.float32)


def bags_table(emb: Embeddings, bags, token_of_column: np.ndarray, cutoff, prior: np.ndarray, temperature: float,
               query_temperature: float | None = None) -> pa.Table:
    """``tokens.parquet`` rows: entity_id, entity_type, source_key, tokens, weights, log_prior, cutoff;
    the bags' ``τ`` (:func:`bag_temperature`) in the schema metadata as ``bag_temperature``, and the
    query bags' (:func:`query_temperature`) as ``query_temperature`` where there is one."""
    bags.sort_indices()
    tokens = pa.ListArray.from_arrays(pa.array(bags.indptr.astype(np.int32)), pa.array(token_of_column[bags.indices].astype(np.int64)))
    weights = pa.ListArray.from_arrays(pa.array(bags.indptr.astype(np.int32)), pa.array(bags.data.astype(np.float32)))
    return pa.table({
        "entity_id": pa.array(emb.entity_id, pa.int64()),
        "entity_type": pa.array(emb.entity_type.tolist(), pa.string()),
        "source_key": pa.array(emb.source_key.tolist(), pa.string()),
        "tokens": tokens,
        "weights": weights,
        "log_prior": pa.array(prior, pa.float32()),
        "cutoff": pa.array([cutoff] * emb.entity_id.size, pa.timestamp("us", tz="UTC")),
    }).replace_schema_metadata({"bag_temperature": str(temperature)}
                               | ({} if query_temperature is None else {"query_temperature": str(query_temperature)}))


def postings_table(tokens: pa.Table) -> pa.Table:
    """Flatten bags into postings ``token, entity_id, entity_type, weight`` sorted by (token, entity_id)."""
    lengths = tokens.column("tokens").combine_chunks().value_lengths().to_numpy(zero_copy_only=False)
    flat = pa.table({
        "token": tokens.column("tokens").combine_chunks().flatten(),
        "entity_id": pa.array(np.repeat(tokens.column("entity_id").to_numpy(), lengths), pa.int64()),
        "entity_type": pa.array(np.repeat(np.asarray(tokens.column("entity_type").to_pylist(), dtype=object), lengths).tolist(), pa.string()),
        "weight": tokens.column("weights").combine_chunks().flatten(),
    })
    return flat.sort_by([("token", "ascending"), ("entity_id", "ascending")])


# ----------------------------------------------------------------------------- loading for queries
@dataclass
class TokenStore:
    """One partition's bags, index and descriptions, ready for ``hir retrieve`` / ``hir tokens``."""

    partition: str
    bags: pa.Table
    index: "InvertedIndex"  # noqa: F821
    descriptions: dict[int, str]
    vectors: "torch.Tensor | None"  # noqa: F821  rows aligned with the index rows
    prior: "torch.Tensor"  # noqa: F821  log(1 + p_e) per index row
    temperature: float  # the bags' τ (:func:`bag_temperature`)
    probe: QueryProbe | None = None  # query bags (`bom_query_probes`), where the quantizer and embeddings exist
    query_temperature: float | None = None  # their τ (:func:`query_temperature`)


def load_index(postings: pa.Table):
    """An :class:`~hir.models.index.InvertedIndex` from a postings table; rows = sorted entity ids."""
    import torch

    from hir.models.index import InvertedIndex

    entity = postings.column("entity_id").to_numpy()
    ids, first, rows = np.unique(entity, return_index=True, return_inverse=True)
    types = np.asarray(postings.column("entity_type").to_pylist(), dtype=object)[first]
    names = sorted(set(types.tolist()))
    type_code = np.asarray([names.index(t) for t in types], dtype=np.int64)
    return InvertedIndex.build(
        torch.from_numpy(rows.astype(np.int64)),
        torch.from_numpy(postings.column("token").to_numpy().astype(np.int64)),
        torch.from_numpy(postings.column("weight").to_numpy().astype(np.float32)),
        torch.from_numpy(ids.astype(np.int64)),
        torch.from_numpy(type_code),
        names,
    )


def load_store(settings: Settings, partition: str | None = None, with_vectors: bool = True) -> TokenStore:
    """Load the bags, index, descriptions (and embeddings for re-ranking) of one partition."""
    import torch

    catalogue = Artifacts(settings.artifacts_dir)
    partition = written_partition(catalogue, "bom_tokens", partition)
    bags = pq.read_table(catalogue.tokens(partition))
    postings_path = catalogue.postings(partition)
    postings = pq.read_table(postings_path) if postings_path.exists() else postings_table(bags)
    index = load_index(postings)
    described = catalogue.descriptions(partition)
    descriptions = {}
    if described.exists():
        table = pq.read_table(described, columns=["token", "description"])
        descriptions = dict(zip(table.column("token").to_pylist(), table.column("description").to_pylist()))
    vectors = None
    emb_path = catalogue.embeddings(partition)
    if with_vectors and emb_path.exists():
        emb = read_embeddings(emb_path)
        order = np.argsort(emb.entity_id)
        ids = index.entity_ids.numpy()
        slot = np.searchsorted(emb.entity_id[order], ids).clip(0, max(emb.entity_id.size - 1, 0))
        if emb.entity_id.size and np.array_equal(emb.entity_id[order][slot], ids):
            vectors = torch.from_numpy(emb.vectors[order][slot])
    prior = dict(zip(bags.column("entity_id").to_pylist(), bags.column("log_prior").to_pylist()))
    prior = torch.tensor([prior[e] for e in index.entity_ids.tolist()], dtype=torch.float32)
    meta = bags.schema.metadata
    query_t = float(meta[b"query_temperature"]) if b"query_temperature" in meta else None  # bags made with probes
    probed = query_t is not None and vectors is not None and settings.bom_query_probes > 0
    probe = load_probe(catalogue.quantizer_dir(partition)) if probed else None
    return TokenStore(partition, bags, index, descriptions, vectors, prior, float(meta[b"bag_temperature"]), probe, query_t)


def find_bag(store: TokenStore, entity_type: str, key: str) -> dict:
    """The bag row of ``(entity_type, key)``; a one-line SettingsError when it is not there."""
    types = store.bags.column("entity_type").to_pylist()
    keys = store.bags.column("source_key").to_pylist()
    for i, (t, k) in enumerate(zip(types, keys)):
        if t == entity_type and k == str(key):
            return store.bags.slice(i, 1).to_pylist()[0]
    if entity_type not in set(types):
        raise SettingsError(f"no {entity_type!r} entities in bom_tokens partition {store.partition}; types: {', '.join(sorted(set(types)))}")
    raise SettingsError(f"unknown {entity_type} key {key!r} in bom_tokens partition {store.partition}")


def describe(store: TokenStore, token: int) -> str:
    """``L<level>:<path>`` plus the token's description when ``token_descriptions`` exists."""
    level, path = divmod(int(token), TOKEN_LEVEL_STRIDE)
    text = store.descriptions.get(int(token), "")
    return f"L{level}:{path}" + (f" — {text}" if text else "")


def coarse_token(token: int, sizes: list[int]) -> int:
    """The level-1 token a nested token implies: its path's first code (``sizes``: codewords per level)."""
    level, path = divmod(int(token), TOKEN_LEVEL_STRIDE)
    return TOKEN_LEVEL_STRIDE + path // int(np.prod(sizes[1:level], dtype=np.int64))


# ----------------------------------------------------------------------------- descriptions
def describe_tokens(
    postings: pa.Table, texts: "pd.DataFrame", labels: "pd.DataFrame", top_terms: int = 5, top_labels: int = 3  # noqa: F821
) -> pa.Table:
    """A readable description per token from the entities holding it.

    Args:
        postings: ``token, entity_id, weight`` (see :func:`postings_table`).
        texts: ``entity_id, text`` of all content before the cut-off (the tf-idf corpus).
        labels: ``entity_id, label`` pairs: an entity's categories/genres by name.
        top_terms, top_labels: how many of each to keep.
    Each token's term mass is ``T(t, term) = Σ_e w(t, e) · tfidf(e, term)`` over its entities with
    content (tf-idf against all content), ranked by the class-based tf-idf
    ``T(t, term) · log(1 + A / Σ_t' T(t', term))`` with ``A`` the mean mass per token, so words
    spread over every token (shared ad boilerplate) give way to the token's own words. Its label
    score is ``Σ_e w(t, e)`` over its entities with that label (the most common labels).
    Returns ``token, level, path, entities, top_terms list<str>, top_labels list<str>, description``.
    """
    token = postings.column("token").to_numpy()
    entity = postings.column("entity_id").to_numpy()
    weight = postings.column("weight").to_numpy().astype(np.float64)
    uniq, token_row = np.unique(token, return_inverse=True)
    counts = np.bincount(token_row, minlength=uniq.size)
    terms = _weighted_top(token_row, uniq.size, entity, weight, *_tfidf(texts), top_terms, distinctive=True)
    cats = _weighted_top(token_row, uniq.size, entity, weight, *_label_matrix(labels), top_labels)
    described = [
        "; ".join(part for part in (", ".join(t), ("in " + ", ".join(c)) if c else "") if part) for t, c in zip(terms, cats)
    ]
    return pa.table({
        "token": pa.array(uniq, pa.int64()),
        "level": pa.array(uniq // TOKEN_LEVEL_STRIDE, pa.int32()),
        "path": pa.array(uniq % TOKEN_LEVEL_STRIDE, pa.int64()),
        "entities": pa.array(counts, pa.int64()),
        "top_terms": pa.array(terms, pa.list_(pa.string())),
        "top_labels": pa.array(cats, pa.list_(pa.string())),
        "description": pa.array(described, pa.string()),
    })


def _tfidf(texts):
    """``(entity ids sorted, [E, V] tf-idf CSR, vocabulary)``; empty when there is no text."""
    import scipy.sparse as sp
    from sklearn.feature_extraction.text import TfidfVectorizer

    texts = texts.dropna(subset=["text"]).sort_values("entity_id")
    texts = texts[texts["text"].str.strip() != ""]
    if texts.empty:
        return np.zeros(0, np.int64), sp.csr_matrix((0, 0)), np.zeros(0, dtype=object)
    vectorizer = TfidfVectorizer(stop_words="english", sublinear_tf=True, max_features=50_000,
                                 token_pattern=r"(?u)\b[^\W\d_][^\W\d_]+\b")
    try:
        matrix = vectorizer.fit_transform(texts["text"].tolist())
    except ValueError:  # only stop words / no alphabetic tokens
        return np.zeros(0, np.int64), sp.csr_matrix((0, 0)), np.zeros(0, dtype=object)
    return texts["entity_id"].to_numpy(np.int64), matrix.tocsr(), vectorizer.get_feature_names_out()


def _label_matrix(labels):
    """``(entity ids sorted, [E, L] 0/1 CSR, label names)`` from ``entity_id, label`` pairs."""
    import scipy.sparse as sp

    labels = labels.dropna().drop_duplicates()
    ids, rows = np.unique(labels["entity_id"].to_numpy(np.int64), return_inverse=True)
    names, cols = np.unique(labels["label"].astype(str).to_numpy(), return_inverse=True)
    matrix = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(ids.size, names.size))
    return ids, matrix, names.astype(object)


def _weighted_top(token_row, n_tokens, entity, weight, ids, matrix, names, top, distinctive: bool = False):
    """Per token, the ``top`` columns of ``S(t) = Σ_e w(t, e) · matrix[e]`` with a positive score.

    With ``distinctive``, columns are ranked by ``S(t, c) · log(1 + A / Σ_t' S(t', c))`` instead,
    ``A`` being the mean row mass of S (class-based tf-idf).
    """
    import scipy.sparse as sp

    if ids.size == 0 or matrix.shape[1] == 0:
        return [[] for _ in range(n_tokens)]
    slot = np.searchsorted(ids, entity).clip(0, ids.size - 1)
    hit = ids[slot] == entity
    link = sp.csr_matrix((weight[hit], (token_row[hit], slot[hit])), shape=(n_tokens, ids.size))
    scores = (link @ matrix).tocsr()
    if distinctive and scores.nnz:
        mass = np.asarray(scores.sum(axis=0)).ravel()
        lift = np.log1p(scores.sum() / n_tokens / np.where(mass > 0, mass, 1.0))
        scores = (scores @ sp.diags(lift)).tocsr()
    out = []
    for t in range(n_tokens):
        row = scores.getrow(t)
        best = np.argsort(-row.data, kind="stable")[:top]
        out.append([str(names[c]) for c in row.indices[best]])
    return out
