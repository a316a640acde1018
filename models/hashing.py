"""Integer hashing in torch, shared by the view sampler (edge dropout) and the encoder (hashed ids).

``mix32`` is a 32-bit avalanche mixer (xor-shift / multiply rounds, after Wellons' ``lowbias32``
with multipliers below ``2**31`` so every product fits in int64 without overflow). It is a pure
function of its input, so a hash never depends on the batch, the device or the order of tokens.
"""

from __future__ import annotations

import torch

_MASK32 = 0xFFFFFFFF
_MUL1 = 0x7FEB352D
_MUL2 = 0x5BD1E995 & 0x7FFFFFFF


def mix32(x: torch.Tensor) -> torch.Tensor:
    """Hash an int64 tensor of values in ``[0, 2**32)`` to int64 values in ``[0, 2**32)``.

    ``x ← x ⊕ (x >> 16); x ← x·m1 mod 2³²; x ← x ⊕ (x >> 15); x ← x·m2 mod 2³²; x ← x ⊕ (x >> 16)``.
    """
    x = x & _MASK32
    x = x ^ (x >> 16)
    x = (x * _MUL1) & _MASK32
    x = x ^ (x >> 15)
    x = (x * _MUL2) & _MASK32
    return x ^ (x >> 16)


def hash64(x: torch.Tensor, seed: int | torch.Tensor) -> torch.Tensor:
    """Hash int64 ``x`` (any value, including ids ≥ 2³²) under ``seed`` to ``[0, 2**32)``.

    The low and high 32-bit halves are mixed in turn: ``h = mix32(mix32(lo ⊕ seed) ⊕ hi)``.

    Args:
        x: int64 tensor of values to hash.
        seed: an int or an int64 tensor broadcastable to ``x``; different seeds give independent hashes.
    """
    lo = x & _MASK32
    hi = (x >> 32) & _MASK32
    h = mix32(lo ^ (torch.as_tensor(seed, dtype=torch.int64) & _MASK32))
    return mix32(h ^ hi)


def uniform_hash(x: torch.Tensor, seed: int | torch.Tensor) -> torch.Tensor:
    """A deterministic float64 in ``[0, 1)`` per element of ``x``: ``hash64(x, seed) / 2³²``."""
    return hash64(x, seed).to(torch.float64) / float(1 << 32)
