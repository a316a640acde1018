"""Multi-head self-attention over view tokens with structural biases, in two backends.

For tokens ``i`` (query) and ``j`` (key) of one view, head ``h``::

    score_h(i, j) = q_i·k_j / √d_head + T_h[type_i, type_j] + D_h[min(dist(i, j), max_distance)]

and ``-∞`` where ``j`` is padding. ``T`` ``[heads, types, types]`` is the learned node-type-transition
bias and ``D`` ``[heads, max_distance + 1]`` the learned shortest-path-distance bias. The distance is
the tree distance within the view, from each token's ancestors by depth
(``ancestors[i, d]``: the position of ``i``'s ancestor at depth ``d``, -1 below ``i``)::

    lca(i, j) = #{d : ancestors[i, d] = ancestors[j, d] ≥ 0} − 1
    dist(i, j) = depth_i + depth_j − 2·lca(i, j)

so no pairwise input is needed. Backends (the same parameters, the same function):

* ``flex``: :func:`torch.nn.attention.flex_attention.flex_attention` under ``torch.compile`` with
  a ``score_mod`` that looks the biases up from the per-token tensors — no ``S×S`` tensor of any
  kind. Forward runs everywhere; its backward needs a GPU (FlexAttention has no CPU backward).
  The compiled kernel is specialised to the batch and sequence sizes (inductor's CPU FlexAttention
  template does not compile with dynamic shapes), so keep them fixed — pad a short last batch —
  rather than paying a compile (tens of seconds on CPU) per new size. The sequence is padded (as
  masked padding tokens) to a multiple of :data:`FLEX_SEQ_MULTIPLE` first: on AVX2, inductor's CPU
  kernel (torch 2.14) returns wrong scores, different from call to call, for some key lengths
  that are not multiples of 16 (24 and 40 among them; NaN rows or finite wrong ones in the last
  views of a batch), while at multiples of 16 and 32 it agrees with ``dense`` on AVX2 and AVX-512
  (measured under ``ATEN_CPU_CAPABILITY=avx2``; ``tests/models/test_attention.py`` holds it).
* ``dense``: the bias materialised as ``[B, heads, S, S]`` and
  :func:`torch.nn.functional.scaled_dot_product_attention` with ``attn_mask = bias``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

BACKENDS = ("dense", "flex")
FLEX_SEQ_MULTIPLE = 32
_COMPILED_FLEX = None


def compiled_flex_attention():
    """``torch.compile(flex_attention)``, built once per process on first use."""
    global _COMPILED_FLEX
    if _COMPILED_FLEX is None:
        from torch.nn.attention.flex_attention import flex_attention

        _COMPILED_FLEX = torch.compile(flex_attention, dynamic=False)
    return _COMPILED_FLEX


@dataclass
class TokenStructure:
    """The per-token inputs of the attention biases (all ``[B, S]`` unless noted).

    Attributes:
        node_type: node type ids in ``[0, num_node_types)``.
        depth: depth in the view tree.
        ancestors: ``[B, S, max_depth + 1]`` ancestor positions by depth, -1 below the token.
        pad: True for padding (masked as keys).
    """

    node_type: torch.Tensor
    depth: torch.Tensor
    ancestors: torch.Tensor
    pad: torch.Tensor

    def padded_to(self, seq: int) -> "TokenStructure":
        """The same structure with padding tokens appended up to ``seq`` positions."""
        extra = seq - self.pad.shape[1]
        if extra <= 0:
            return self
        return TokenStructure(
            node_type=F.pad(self.node_type, (0, extra)),
            depth=F.pad(self.depth, (0, extra)),
            ancestors=F.pad(self.ancestors, (0, 0, 0, extra), value=-1),
            pad=F.pad(self.pad, (0, extra), value=True),
        )


def tree_distance(structure: TokenStructure, max_distance: int) -> torch.Tensor:
    """Dense ``[B, S, S]`` tree distances ``min(dist(i, j), max_distance)`` (module doc formula)."""
    anc = structure.ancestors
    same = (anc.unsqueeze(2) == anc.unsqueeze(1)) & (anc >= 0).unsqueeze(2)
    lca = same.sum(-1, dtype=torch.int32) - 1
    depth = structure.depth.to(torch.int32)
    return (depth.unsqueeze(2) + depth.unsqueeze(1) - 2 * lca).clamp(0, max_distance).long()


def bias_index(structure: TokenStructure, max_distance: int, num_node_types: int) -> torch.Tensor:
    """Int64 ``[B, S, S]`` index of each (query, key) pair into the flattened bias table of
    :meth:`BiasedSelfAttention.dense_bias`: ``(type_q · T + type_k) · (D + 1) + dist``, with padding
    keys on the one extra slot (``-∞``). Built once per forward and shared by every layer, so a
    layer's bias is a single gather."""
    types = structure.node_type
    index = (types.unsqueeze(2) * num_node_types + types.unsqueeze(1)) * (max_distance + 1) + tree_distance(structure, max_distance)
    return index.masked_fill(structure.pad.unsqueeze(1), num_node_types * num_node_types * (max_distance + 1))


class BiasedSelfAttention(nn.Module):
    """Self-attention with node-type-transition and tree-distance biases; ``dense`` or ``flex``.

    Args:
        dim: model width (a multiple of ``heads``).
        heads: attention heads.
        num_node_types: rows/columns of the type-transition table.
        max_distance: distances beyond this share the last distance bias.
    """

    def __init__(self, dim: int, heads: int, num_node_types: int, max_distance: int):
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim {dim} is not a multiple of heads {heads}")
        self.heads = heads
        self.max_distance = max_distance
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.type_bias = nn.Parameter(torch.zeros(heads, num_node_types, num_node_types))
        self.dist_bias = nn.Parameter(torch.zeros(heads, max_distance + 1))

    def forward(self, x: torch.Tensor, structure: TokenStructure, backend: str = "dense", index: torch.Tensor | None = None) -> torch.Tensor:
        """Attend over ``x`` ``[B, S, dim]``; returns ``[B, S, dim]``.

        Args:
            x: token states.
            structure: per-token bias inputs.
            backend: ``"dense"`` or ``"flex"``.
            index: for ``dense`` only, precomputed :func:`bias_index` (shared by all layers).
        """
        batch, seq, dim = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        if backend == "dense":
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=self.dense_bias(structure, index))
        elif backend == "flex":
            out = self.flex(q, k, v, structure)
        else:
            raise ValueError(f"unknown attention backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        return self.out(out.transpose(1, 2).reshape(batch, seq, dim))

    def flex(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, structure: TokenStructure) -> torch.Tensor:
        """Compiled FlexAttention over ``[B, heads, S, d]`` inputs, run at a sequence length padded
        to a multiple of :data:`FLEX_SEQ_MULTIPLE` (see the module doc); returns ``[B, heads, S, d]``."""
        seq = q.shape[2]
        padded = -(-seq // FLEX_SEQ_MULTIPLE) * FLEX_SEQ_MULTIPLE
        if padded != seq:
            q, k, v = (F.pad(t, (0, 0, 0, padded - seq)) for t in (q, k, v))
            structure = structure.padded_to(padded)
        out = compiled_flex_attention()(q, k, v, score_mod=self.score_mod(structure))
        return out[:, :, :seq]

    def dense_bias(self, structure: TokenStructure, index: torch.Tensor | None = None) -> torch.Tensor:
        """The materialised ``[B, heads, S, S]`` bias ``type_bias[h, t_q, t_k] + dist_bias[h, d]``,
        ``-∞`` on padding keys: one gather of the flattened table at :func:`bias_index`."""
        if index is None:
            index = bias_index(structure, self.max_distance, self.type_bias.shape[1])
        table = (self.type_bias.unsqueeze(-1) + self.dist_bias[:, None, None, :]).reshape(self.heads, -1)
        table = F.pad(table, (0, 1), value=float("-inf"))
        return table[:, index].transpose(0, 1)

    def score_mod(self, structure: TokenStructure):
        """The FlexAttention ``score_mod`` computing both biases and the padding mask per pair."""
        types, depth, pad = structure.node_type, structure.depth, structure.pad
        ancestors = structure.ancestors
        levels = ancestors.shape[-1]
        type_bias, dist_bias, max_distance = self.type_bias, self.dist_bias, self.max_distance

        def score_mod(score, b, h, q_idx, kv_idx):
            lca = -1
            for level in range(levels):
                aq = ancestors[b, q_idx, level]
                lca = lca + ((aq == ancestors[b, kv_idx, level]) & (aq >= 0)).to(torch.int64)
            dist = (depth[b, q_idx] + depth[b, kv_idx] - 2 * lca).clamp(0, max_distance)
            score = score + type_bias[h, types[b, q_idx], types[b, kv_idx]] + dist_bias[h, dist]
            return torch.where(pad[b, kv_idx], float("-inf"), score)

        return score_mod
