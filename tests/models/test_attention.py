"""Biased attention: compiled flex ≡ dense at every batch, padding and sequence length, call after call.

Inductor's CPU FlexAttention kernel (torch 2.14, AVX2 code path) changes its answer between calls for
key lengths such as 24 and 40; :meth:`BiasedSelfAttention.flex` pads the sequence to a multiple of
``FLEX_SEQ_MULTIPLE``. These tests repeat the comparison on this machine's kernels and, in a fresh
process with its own compile cache, on the forced AVX2 kernels.
"""

import json
import os
import subprocess
import sys

import pytest
import torch
from hir.models.attention import BiasedSelfAttention, TokenStructure

# (batch, sequence): lengths on and off the kernel's vector width, up to a broad view past 128 tokens.
# One batch size, so the compiled kernel is shared by the lengths that pad alike.
SHAPES = [(6, 24), (6, 40), (6, 17), (6, 5), (6, 129)]
LEVELS = 4


def random_structure(batch: int, seq: int, seed: int) -> TokenStructure:
    """Random view trees with padding: view 0 full, the others of random length ≥ 1."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, seq + 1, (batch,), generator=g)
    lengths[0] = seq
    pad = torch.arange(seq) >= lengths[:, None]
    depth = torch.randint(0, LEVELS, (batch, seq), generator=g)
    depth[:, 0] = 0
    ancestors = torch.full((batch, seq, LEVELS), -1, dtype=torch.long)
    ancestors[:, :, 0] = 0
    for level in range(1, LEVELS):
        ancestors[:, :, level] = torch.where(depth >= level, torch.randint(0, seq, (batch, seq), generator=g), -1)
    return TokenStructure(torch.randint(0, 5, (batch, seq), generator=g), depth, ancestors, pad)


def attention_module(seed: int = 0) -> BiasedSelfAttention:
    """A module whose biases are far from zero, so a wrong bias lookup shows."""
    torch.manual_seed(seed)
    module = BiasedSelfAttention(32, 4, 5, 6).eval()
    with torch.no_grad():
        module.type_bias.normal_()
        module.dist_bias.normal_()
    return module


def disagreements(repeats: int) -> dict:
    """For each shape, how many of ``repeats`` flex calls differ from dense on a real token (> 1e-4)."""
    module = attention_module()
    out = {}
    with torch.no_grad():
        for batch, seq in SHAPES:
            structure = random_structure(batch, seq, seed=batch * 1000 + seq)
            x = torch.randn(batch, seq, 32, generator=torch.Generator().manual_seed(seq))
            dense = module(x, structure, "dense")
            real = ~structure.pad
            bad = 0
            for _ in range(repeats):
                flex = module(x, structure, "flex")
                bad += not (torch.isfinite(flex).all() and (flex - dense)[real].abs().max() <= 1e-4)
            out[f"{batch}x{seq}"] = bad
    return out


def test_padded_structure_masks_the_added_tokens():
    structure = random_structure(3, 5, seed=0)
    padded = structure.padded_to(8)
    assert padded.pad.shape == (3, 8) and padded.ancestors.shape == (3, 8, LEVELS)
    assert padded.pad[:, 5:].all() and (padded.ancestors[:, 5:] == -1).all()
    assert torch.equal(padded.pad[:, :5], structure.pad) and torch.equal(padded.depth[:, :5], structure.depth)
    assert structure.padded_to(5) is structure


@pytest.mark.slow
def test_flex_equals_dense_call_after_call():
    assert disagreements(repeats=10) == {f"{b}x{s}": 0 for b, s in SHAPES}


@pytest.mark.slow
def test_flex_equals_dense_fifty_times_on_forced_avx2_kernels(tmp_path):
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    code = "import json, test_attention as t; print(json.dumps(t.disagreements(repeats=50)))"
    done = subprocess.run([sys.executable, "-c", code], cwd=os.path.dirname(__file__), env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {f"{b}x{s}": 0 for b, s in SHAPES}
