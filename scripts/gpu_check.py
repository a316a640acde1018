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
    """Warm up, then the median ms of ``REPEATS`` steps and the peak memory (MiB, 0 off CUDA) of one step."""
    cuda = x.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    result = _step(module, x, structure, backend)
    sync()
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        _step(module, x, structure, backend)
        sync()
        times.append((time.perf_counter() - start) * 1000)
    if not cuda:
        return result, statistics.median(times), 0.0
    torch.cuda.reset_peak_memory_stats()
    _step(module, x, structure, backend)
    sync()
    return result, statistics.median(times), torch.cuda.max_memory_allocated() / 2**20


def compare(seq: int, device, reference: str = "dense", candidate: str = "flex") -> dict:
    """One size: the JSON row of ``candidate`` against ``reference`` (both from the same seed).

    ``max_abs_diff_*``: largest absolute differences of the output and of the gradients of the
    input, the type bias and the distance bias; ``dense_*``/``flex_*``: median step time (ms) and
    peak CUDA memory (MiB) of the reference and the candidate.
    """
    import torch
    from hir.cli.bench.attention import make_problem

    module, x, structure = make_problem(4, seq, 4, 32, seed=0, device=device)
    ref, ref_ms, ref_mb = _timed(module, x, structure, reference, torch)
    got, got_ms, got_mb = _timed(module, x, structure, candidate, torch)
    names = ("out", "grad_x", "grad_type_bias", "grad_dist_bias")
    diffs = {f"max_abs_diff_{n}": (a - b).abs().max().item() for n, a, b in zip(names, ref, got)}
    name = torch.cuda.get_device_name() if device.type == "cuda" else str(device)
    return {"seq": seq, "batch": 4, "heads": 4, "device": name, "dense_ms": round(ref_ms, 3), "flex_ms": round(got_ms, 3),
            "dense_peak_mib": round(ref_mb, 1), "flex_peak_mib": round(got_mb, 1), **diffs}


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: CUDA is not available here; skipped")
        return 0
    for seq in SIZES:
        print(json.dumps(compare(seq, torch.device("cuda"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
