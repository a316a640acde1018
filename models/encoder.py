"""The HIR graph transformer: view tokens → the anchor's representation.

Token embedding (``dim`` wide), the sum of three encoders:

* node: ``E_type[type] + Σ_{k<K} E_hash[h_k(entity_id) mod buckets] / √K
  + has·(W_wk·wk) + E_has[has] + (meta·W_meta[type] + b_meta[type])`` — a deep-hash id
  embedding (``K`` independent hashes into one shared table, so an id never seen still gets a
  vector), projected world knowledge with a learned "has / has not" vector, and a per-type
  projection of the metadata (log degree, age, activity);
* position: ``E_hop[min(hop, max_hop)] + W_rw·[p, log(p + 1e-6)]`` with ``p`` the random-walk
  landing probability from the anchor;
* edge (the edge that brought the token in): ``E_edge[edge_type] + W_w·log1p(weight)
  + W_dt·[sin(f_m·τ), cos(f_m·τ)]_m`` with ``τ = log1p(dt / 1 s)`` and geometric frequencies
  ``f_m = 2^(m/2)`` — a log-scaled sinusoid of the time since the last interaction.

Then LayerNorm, dropout, a pre-norm transformer stack (``x ← x + Attn(LN x)``,
``x ← x + FFN(LN x)``) with :class:`~hir.models.attention.BiasedSelfAttention`, a final LayerNorm;
the anchor's state (position 0) is the representation.

World knowledge per token comes from :func:`gather_wk` (rows of a table indexed by node, zeros and
``has = False`` where an entity has none).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
from hir.models.attention import BiasedSelfAttention, TokenStructure, bias_index
from hir.models.hashing import hash64
from hir.models.sampler import View
from torch import nn

_HASH_SEEDS = (0x2545F491, 0x1B873593, 0x68E31DA4, 0x3C6EF372, 0x0B4F9E3D, 0x5F356495, 0x7A4C3F21, 0x19D699A5)


@dataclass
class EncoderConfig:
    """Hyper-parameters of :class:`HIREncoder` (saved as the checkpoint's JSON config).

    Attributes:
        dim: model width.
        layers: transformer blocks.
        heads: attention heads.
        ffn_mult: feed-forward width = ``ffn_mult · dim``.
        dropout: dropout on the embedding and on every residual branch.
        num_node_types: node types of the graph.
        num_edge_types: edge types of the graph; id ``num_edge_types`` is reserved for the anchor.
        hash_buckets: rows of the shared hashed-id table.
        num_hashes: hash functions per id (at most 8).
        wk_dim: world-knowledge vector width (0: no world knowledge).
        meta_dim: node metadata features (``graph.node_features`` width).
        max_hop: hops beyond this share the last hop embedding.
        max_distance: tree distances beyond this share the last distance bias.
        dt_frequencies: sinusoid frequencies for the edge's time since last interaction.
        pooled_ids: add the view's pooled hashed ids to the representation
            (:meth:`~hir.models.model.HIRModel.pooled_ids`); off in checkpoints written before it
            existed, which this default rebuilds exactly.
        recency_weight: ``ρ`` at the start of training (it is learnt), the weight a ``recency_type``
            anchor's pooled content and ids add to its newest entries
            (:func:`~hir.models.model.pooling_weights`); 0: off, as in checkpoints written before it.
        recency_half_rank: ``h`` at the start of training (learnt): the ``r``-th newest entry adds
            ``ρ · 2^(−r/h)``.
        recency_type: node type id of the anchors whose pooling weighs recency (the users), -1 none.
        recency_edge_types: edge type ids of the entries ranked by recency (the engagements, not
            the impressions beside them); empty: every edge type.
        pool_direct: a ``recency_type`` anchor pools only its direct neighbours (hop 1: what it
            engaged with), not its own id nor the walk's further tokens
            (:func:`~hir.models.model.pooling_weights`); off in checkpoints written before it.
    """

    dim: int = 128
    layers: int = 4
    heads: int = 4
    ffn_mult: int = 4
    dropout: float = 0.1
    num_node_types: int = 8
    num_edge_types: int = 8
    hash_buckets: int = 1 << 16
    num_hashes: int = 3
    wk_dim: int = 0
    meta_dim: int = 3
    max_hop: int = 3
    max_distance: int = 6
    dt_frequencies: int = 8
    pooled_ids: bool = False
    recency_weight: float = 0.0
    recency_half_rank: float = 1.0
    recency_type: int = -1
    recency_edge_types: list[int] = field(default_factory=list)
    pool_direct: bool = False

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "EncoderConfig":
        """A config from :meth:`to_dict` output; unknown keys are an error."""
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown encoder config keys: {', '.join(unknown)}")
        return cls(**values)


def gather_wk(view: View, wk_table: torch.Tensor, has_wk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token world knowledge of a view.

    Args:
        view: the view; ``view.node`` indexes the tables (-1 = padding).
        wk_table: ``[N, wk_dim]`` vectors by graph node (any values where ``has_wk`` is False).
        has_wk: ``[N]`` bool, True where the entity has world knowledge.

    Returns:
        ``wk`` ``[B, S, wk_dim]`` (zeros where missing or padding) and ``has`` ``[B, S]`` bool.
    """
    safe = view.node.clamp_min(0)
    has = has_wk[safe] & ~view.pad
    wk = torch.where(has.unsqueeze(-1), wk_table[safe], 0.0)
    return wk, has


class NodeEncoder(nn.Module):
    """Type + deep-hash id + world knowledge + per-type metadata (see the module doc)."""

    def __init__(self, c: EncoderConfig):
        super().__init__()
        if not 1 <= c.num_hashes <= len(_HASH_SEEDS):
            raise ValueError(f"num_hashes must lie in [1, {len(_HASH_SEEDS)}], got {c.num_hashes}")
        self.config = c
        self.type_embedding = nn.Embedding(c.num_node_types, c.dim)
        self.hashed = nn.Embedding(c.hash_buckets, c.dim)
        nn.init.normal_(self.hashed.weight, std=c.dim**-0.5)
        self.register_buffer("seeds", torch.tensor(_HASH_SEEDS[: c.num_hashes], dtype=torch.int64), persistent=False)
        self.meta_weight = nn.Parameter(torch.randn(c.num_node_types, c.meta_dim, c.dim) * c.meta_dim**-0.5)
        self.meta_bias = nn.Parameter(torch.zeros(c.num_node_types, c.dim))
        self.wk = nn.Linear(c.wk_dim, c.dim) if c.wk_dim else None
        self.has_wk = nn.Embedding(2, c.dim) if c.wk_dim else None

    def hashed_id(self, entity_id: torch.Tensor) -> torch.Tensor:
        """``Σ_k E_hash[h_k(id) mod buckets] / √K`` for int64 ids of any shape."""
        buckets = hash64(entity_id.unsqueeze(-1), self.seeds) % self.config.hash_buckets
        return self.hashed(buckets).sum(-2) / math.sqrt(self.config.num_hashes)

    def typed_meta(self, types: torch.Tensor, meta: torch.Tensor) -> torch.Tensor:
        """``meta·W_meta[type] + b_meta[type]`` per token (``[..., dim]``), as one matmul of the features
        spread into their type's slot, ``[onehot(type) ⊗ meta, onehot(type)] · [W_meta; b_meta]``:
        gathering ``W_meta[type]`` per token would materialise ``[..., meta_dim, dim]`` and scatter-add its
        gradient back, about 15× this one's time on CPU (≈ 45 ms of a 330 ms training step). The sums
        differ from the gather's in rounding only."""
        onehot = nn.functional.one_hot(types, self.config.num_node_types).to(meta.dtype)
        spread = torch.cat([(onehot.unsqueeze(-1) * meta.unsqueeze(-2)).flatten(-2), onehot], -1)
        return spread @ torch.cat([self.meta_weight.flatten(0, 1), self.meta_bias])

    def forward(self, view: View, wk: torch.Tensor | None, has_wk: torch.Tensor | None) -> torch.Tensor:
        types = view.node_type
        x = self.type_embedding(types) + self.hashed_id(view.entity_id) + self.typed_meta(types, view.meta)
        if self.wk is not None:
            if wk is None:
                wk = view.meta.new_zeros(*types.shape, self.config.wk_dim)
            if has_wk is None:
                has_wk = wk.ne(0).any(-1)
            x = x + self.wk(wk) * has_wk.unsqueeze(-1) + self.has_wk(has_wk.long())
        return x


class PositionEncoder(nn.Module):
    """Hop embedding + projected random-walk landing probability."""

    def __init__(self, c: EncoderConfig):
        super().__init__()
        self.max_hop = c.max_hop
        self.hop = nn.Embedding(c.max_hop + 1, c.dim)
        self.rw = nn.Linear(2, c.dim)

    def forward(self, view: View) -> torch.Tensor:
        p = view.rw_prob.clamp(0, 1)
        return self.hop(view.hop.clamp(0, self.max_hop)) + self.rw(torch.stack([p, torch.log(p + 1e-6)], -1))


class EdgeEncoder(nn.Module):
    """Edge type + log decayed weight + log-scaled sinusoid of the time since last interaction."""

    def __init__(self, c: EncoderConfig):
        super().__init__()
        self.type_embedding = nn.Embedding(c.num_edge_types + 1, c.dim)
        self.weight = nn.Linear(1, c.dim)
        self.dt = nn.Linear(2 * c.dt_frequencies, c.dim)
        self.register_buffer("freq", 2.0 ** (torch.arange(c.dt_frequencies, dtype=torch.float32) / 2), persistent=False)

    def forward(self, view: View) -> torch.Tensor:
        tau = torch.log1p(view.edge_dt.clamp_min(0)).unsqueeze(-1) * self.freq
        return (
            self.type_embedding(view.edge_type)
            + self.weight(torch.log1p(view.edge_weight.clamp_min(0)).unsqueeze(-1))
            + self.dt(torch.cat([torch.sin(tau), torch.cos(tau)], -1))
        )


class Block(nn.Module):
    """Pre-norm transformer block with biased self-attention."""

    def __init__(self, c: EncoderConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(c.dim)
        self.attn = BiasedSelfAttention(c.dim, c.heads, c.num_node_types, c.max_distance)
        self.norm2 = nn.LayerNorm(c.dim)
        self.ffn = nn.Sequential(nn.Linear(c.dim, c.ffn_mult * c.dim), nn.GELU(), nn.Linear(c.ffn_mult * c.dim, c.dim))
        self.drop = nn.Dropout(c.dropout)

    def forward(self, x: torch.Tensor, structure: TokenStructure, backend: str, index: torch.Tensor | None) -> torch.Tensor:
        x = x + self.drop(self.attn(self.norm1(x), structure, backend, index))
        return x + self.drop(self.ffn(self.norm2(x)))


class HIREncoder(nn.Module):
    """The graph transformer encoder (see the module doc).

    Args:
        config: hyper-parameters.
    """

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.config = config
        self.node = NodeEncoder(config)
        self.position = PositionEncoder(config)
        self.edge = EdgeEncoder(config)
        self.embed_norm = nn.LayerNorm(config.dim)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.dim)

    def embed(self, view: View, wk: torch.Tensor | None = None, has_wk: torch.Tensor | None = None) -> torch.Tensor:
        """Token embeddings ``[B, S, dim]`` before the transformer stack."""
        x = self.node(view, wk, has_wk) + self.position(view) + self.edge(view)
        return self.drop(self.embed_norm(x))

    def tokens(self, view: View, wk: torch.Tensor | None = None, backend: str = "dense", has_wk: torch.Tensor | None = None) -> torch.Tensor:
        """All token states ``[B, S, dim]`` after the stack and the final LayerNorm.

        Args:
            view: a batch of views.
            wk: ``[B, S, wk_dim]`` world knowledge per token (see :func:`gather_wk`); None = none.
            backend: ``"dense"`` (training on CPU) or ``"flex"`` (inference; training on GPU).
            has_wk: ``[B, S]`` bool; by default a token has world knowledge where its ``wk`` row
                is not all zeros.
        """
        structure = TokenStructure(view.node_type, view.hop, view.ancestors, view.pad)
        index = bias_index(structure, self.config.max_distance, self.config.num_node_types) if backend == "dense" else None
        x = self.embed(view, wk, has_wk)
        for block in self.blocks:
            x = block(x, structure, backend, index)
        return self.norm(x)

    def forward(self, view: View, wk: torch.Tensor | None = None, backend: str = "dense", has_wk: torch.Tensor | None = None) -> torch.Tensor:
        """The anchors' representations ``[B, dim]`` (token 0 of :meth:`tokens`)."""
        return self.tokens(view, wk, backend, has_wk)[:, 0]
