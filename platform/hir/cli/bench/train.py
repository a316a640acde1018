"""Training throughput of the HIR encoder: `hir bench train --json`.

Times ``--steps`` optimiser steps (after ``--warmup`` untimed ones) on a planted graph and counts
the floating-point operations of one step with ``torch.utils.flop_counter.FlopCounterMode``
(teacher forward, student forward and backward). The model FLOP utilisation is measured against
a large float32 matmul timed in the same run: ``mfu = achieved_gflops / matmul_peak_gflops``.
The counted step runs the dense backend: the flop counter cannot trace compiled FlexAttention
(on CUDA it fails inside its dispatch mode), and both backends compute the same attention.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time

from hir.settings import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=5, help="timed steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    # None: the settings' value (HIR_TRAIN_*), so the benchmark times the step the pipeline trains
    parser.add_argument("--batch", type=int, default=None, help="causal examples per step (anchors = 2x + the candidate pool)")
    parser.add_argument("--pool", type=int, default=None, help="shared candidates per step")
    parser.add_argument("--dim", type=int, default=None)
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--heads", type=int, default=None)
    parser.add_argument("--broad-tokens", type=int, default=None)
    parser.add_argument("--narrow-tokens", type=int, default=None)
    parser.add_argument("--users", type=int, default=2000, help="planted graph size (items = users / 2)")
    parser.add_argument("--matmul", type=int, default=2048, help="side of the peak-FLOPS matmul")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")


def matmul_peak_gflops(n: int, device, repeats: int = 5) -> float:
    """Best-of-``repeats`` GFLOP/s of an ``n × n`` float32 matmul (``2n³`` FLOPs)."""
    import torch

    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    best = float("inf")
    for _ in range(repeats + 1):
        _sync(device)
        start = time.perf_counter()
        (a @ b).sum().item()
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def _sync(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _trainer(args: argparse.Namespace, settings: Settings, device, out: str):
    from hir.models.planted import planted_events, snapshot_at
    from hir.models.trainer import Trainer
    from hir.training.configs import training_configs

    events = planted_events(users=args.users, items=max(2, args.users // 2), coarse=8, fine_per_coarse=6, events_per_user=20)
    graph, _ = snapshot_at(events, float(events.ts.max()) + 1)
    total = args.warmup + args.steps + 1
    given = {"train_batch": args.batch, "train_pool_size": args.pool, "train_dim": args.dim, "train_layers": args.layers,
             "train_heads": args.heads, "train_broad_tokens": args.broad_tokens, "train_narrow_tokens": args.narrow_tokens}
    sized = settings.replace(train_steps=total, train_checkpoint_every=10 * total, train_log_every=10 * total,
                             **{name: value for name, value in given.items() if value is not None})
    configs = training_configs(sized, graph, device_type=device.type)
    return Trainer(graph, *configs, out, device=device), configs.train


def run(args: argparse.Namespace, settings: Settings) -> dict:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else ("cpu" if args.device == "auto" else args.device))
    with tempfile.TemporaryDirectory() as out:
        trainer, config = _trainer(args, settings, device, out)
        for _ in range(args.warmup):
            trainer.train_step()
        _sync(device)
        start = time.perf_counter()
        for _ in range(args.steps):
            trainer.train_step()
        _sync(device)
        step_s = (time.perf_counter() - start) / max(1, args.steps)
        trainer.config = dataclasses.replace(trainer.config, backend="dense")
        with FlopCounterMode(display=False) as counter:
            trainer.train_step()
        flops = counter.get_total_flops()
    peak = matmul_peak_gflops(args.matmul, device)
    teacher = 2 * min(config.batch_size, config.teacher_batch)
    views = teacher + config.narrow_views * (2 * config.batch_size + trainer.pool_size)  # teacher + student views
    achieved = flops / step_s / 1e9
    return {
        "views_per_s": _sig(views / step_s),
        "examples_per_s": _sig(config.batch_size / step_s),
        "views_per_step": views,
        "step_ms": _sig(step_s * 1000),
        "model_gflop_per_step": _sig(flops / 1e9),
        "achieved_gflops": _sig(achieved),
        "matmul_peak_gflops": _sig(peak),
        "mfu": _sig(achieved / peak),
        "device": str(device),
        "backend": config.backend,
        "graph": "planted",
        "batch": config.batch_size,
        "pool": trainer.pool_size,
        "threads": torch.get_num_threads(),
    }


def _sig(x: float) -> float:
    """``x`` to four significant digits."""
    return float(f"{x:.4g}")
