"""GPU check of the two attention backends: `python scripts/gpu_check.py`.

On CUDA, for 1024 and 4096 tokens (batch 4, 4 heads, head dim 32, both biases, padding), runs
:class:`hir.models.attention.BiasedSelfAttention` forward and backward with the compiled ``flex``
backend and with ``dense`` from the same parameters and inputs, and prints one JSON line per size:
the largest differences of the outputs and of the gradients (input, type bias, distance bias), the
median time of a forward+backward step of each backend over a few repeats after warm-up, and each
backend's peak CUDA memory. Where CUDA is absent it says so and exits 0.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

SIZES = (1024, 4096)
REPEATS = 5


def _step(module, x, structure, backend):
    """One forward+backward; returns (output, grad x, grad type bias, grad distance bias)."""
    module.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_(True)
    out = module(x, structure, backend)
    out.square().mean().backward()
    return out.detach(), x.grad, module.type_bias.grad, module.dist_bias.grad


def _timed(module, x, structure, backend, torch) -> tuple[list, float, float]:
    """Warm up, then the median ms of ``REPEATS`` steps and the peak memory (MiB) of one step."""
    result = _step(module, x, structure, backend)
    torch.cuda.synchronize()
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        _step(module, x, structure, backend)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1000)
    torch.cuda.reset_peak_memory_stats()
    _step(module, x, structure, backend)
    torch.cuda.synchronize()
    return result, statistics.median(times), torch.cuda.max_memory_allocated() / 2**20


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: CUDA is not available here; skipped")
        return 0
    from hir.bench.attention import make_problem

    device = torch.device("cuda")
    for seq in SIZES:
        module, x, structure = make_problem(4, seq, 4, 32, seed=0, device=device)
        dense, dense_ms, dense_mb = _timed(module, x, structure, "dense", torch)
        flex, flex_ms, flex_mb = _timed(module, x, structure, "flex", torch)
        names = ("out", "grad_x", "grad_type_bias", "grad_dist_bias")
        diffs = {f"max_abs_diff_{n}": (a - b).abs().max().item() for n, a, b in zip(names, dense, flex)}
        print(json.dumps({"seq": seq, "batch": 4, "heads": 4, "device": torch.cuda.get_device_name(),
                          "dense_ms": round(dense_ms, 3), "flex_ms": round(flex_ms, 3),
                          "dense_peak_mib": round(dense_mb, 1), "flex_peak_mib": round(flex_mb, 1), **diffs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
