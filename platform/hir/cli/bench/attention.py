"""Biased attention, dense vs flex: `hir bench attention --seq 2048 --json`.

One forward pass of :class:`hir.models.attention.BiasedSelfAttention` with both biases (node-type
transition and tree distance) over random view-shaped token trees with padding. Each backend runs
in its own subprocess with the same seed (so the same parameters and inputs): it is warmed up at a
small size (compiling ``flex``) and, where that differs, once at the measured size (the compiled
kernel specialises on shapes), then the measured call runs. Its peak memory is the rise of the process's peak resident
set (``VmHWM``, reset through ``/proc/self/clear_refs`` just before; ``ru_maxrss`` where that is
unavailable) over its resident set just before the call, so the torch runtime does not count.
Each subprocess saves its output to a temporary safetensors file; the parent compares them.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hir.settings import Settings

WARMUP_SEQ = 64
NUM_NODE_TYPES = 6
MAX_DEPTH = 3
MAX_DISTANCE = 6


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seq", type=int, default=2048, help="tokens per view")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)


def random_structure(batch: int, seq: int, generator, device="cpu"):
    """A :class:`TokenStructure` of random view trees: the anchor, then hops 1..3 in blocks.

    Token ``i > 0`` sits at hop ``1 + ⌊3·i/seq⌋`` (capped at ``MAX_DEPTH``) under a uniformly drawn
    token of the previous hop; row ``b`` has its last ``b·seq/8`` tokens as padding.
    """
    import torch

    from hir.models.attention import TokenStructure
    from hir.models.sampler import ancestors_from_parent

    positions = torch.arange(seq)
    depth = torch.where(positions == 0, 0, (1 + 3 * positions // seq).clamp(max=MAX_DEPTH))
    first = torch.stack([(depth < level).sum() for level in range(MAX_DEPTH + 1)])  # first index at each level
    lo = torch.where(depth > 0, first[(depth - 1).clamp_min(0)], 0)
    hi = torch.where(depth > 0, first[depth.clamp_min(1)], 1)
    parent = lo + (torch.rand(batch, seq, generator=generator) * (hi - lo)).long()
    parent[:, 0] = -1
    pad = positions.unsqueeze(0) >= seq - (torch.arange(batch) * seq // 8).unsqueeze(1)
    depth = depth.expand(batch, seq).masked_fill(pad, 0)
    parent = parent.masked_fill(pad, -1)
    types = torch.randint(0, NUM_NODE_TYPES, (batch, seq), generator=generator)
    anc = ancestors_from_parent(parent, depth, pad, MAX_DEPTH)
    return TokenStructure(types.to(device), depth.to(device), anc.to(device), pad.to(device))


def make_problem(batch: int, seq: int, heads: int, head_dim: int, seed: int, device="cpu"):
    """``(attention module with random biases, x [B, S, dim], structure)``, all from ``seed``."""
    import torch

    from hir.models.attention import BiasedSelfAttention

    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    module = BiasedSelfAttention(heads * head_dim, heads, NUM_NODE_TYPES, MAX_DISTANCE)
    with torch.no_grad():
        module.type_bias.normal_(generator=generator)
        module.dist_bias.normal_(generator=generator)
    x = torch.randn(batch, seq, heads * head_dim, generator=generator)
    return module.to(device), x.to(device), random_structure(batch, seq, generator, device)


def _memory_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise OSError(f"{field} missing from /proc/self/status")


def _reset_peak() -> bool:
    """Reset ``VmHWM`` to the current RSS; False where the kernel does not allow it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _peak_kb(reset_ok: bool) -> int:
    return _memory_kb("VmHWM") if reset_ok else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def worker(backend: str, args: argparse.Namespace, out_file: str) -> dict:
    """Warm up, then measure one forward pass of ``backend``; save its output to ``out_file``."""
    import torch
    from safetensors.torch import save_file

    with torch.no_grad():
        for seq in dict.fromkeys((min(WARMUP_SEQ, args.seq), args.seq)):
            module, x, structure = make_problem(args.batch, seq, args.heads, args.head_dim, args.seed)
            module(x, structure, backend)
        reset_ok = _reset_peak()
        before = _memory_kb("VmRSS")
        start = time.perf_counter()
        out = module(x, structure, backend)
        ms = (time.perf_counter() - start) * 1000
        peak = _peak_kb(reset_ok)
    save_file({"out": out.contiguous()}, out_file)
    return {"peak_mb": max(peak - before, 0) / 1024, "ms": ms}


def _run_worker(backend: str, args: argparse.Namespace, out_file: str) -> dict:
    cmd = [sys.executable, "-m", "hir.cli.bench.attention", "--worker", backend, "--out", out_file,
           "--seq", str(args.seq), "--batch", str(args.batch), "--heads", str(args.heads),
           "--head-dim", str(args.head_dim), "--seed", str(args.seed)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{backend} worker failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(args: argparse.Namespace, settings: Settings) -> dict:
    from safetensors.torch import load_file

    with tempfile.TemporaryDirectory(prefix="hir-bench-attention-") as tmp:
        files = {b: str(Path(tmp) / f"{b}.safetensors") for b in ("dense", "flex")}
        results = {b: _run_worker(b, args, files[b]) for b in ("dense", "flex")}
        diff = (load_file(files["dense"])["out"] - load_file(files["flex"])["out"]).abs().max().item()
    dense, flex = results["dense"], results["flex"]
    return {
        "seq": args.seq,
        "batch": args.batch,
        "heads": args.heads,
        "dense_peak_mb": round(dense["peak_mb"], 2),
        "flex_peak_mb": round(flex["peak_mb"], 2),
        "memory_ratio": round(dense["peak_mb"] / max(flex["peak_mb"], 1 / 1024), 2),
        "dense_ms": round(dense["ms"], 2),
        "flex_ms": round(flex["ms"], 2),
        "max_abs_diff": diff,
    }


def _main() -> None:
    parser = argparse.ArgumentParser(description="one backend of the attention benchmark (internal)")
    add_arguments(parser)
    parser.add_argument("--worker", choices=("dense", "flex"), required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    print(json.dumps(worker(args.worker, args, args.out)))


if __name__ == "__main__":
    _main()
