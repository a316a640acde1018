"""Train the HIR encoder on a snapshot folder, on one process or several under ``torchrun``.

    python -m hir.models.train_ddp --snapshot DIR --out DIR [--steps N ...]
    torchrun --nproc_per_node=2 -m hir.models.train_ddp --snapshot DIR --out DIR ...

Under ``torchrun`` (``WORLD_SIZE`` > 1) it joins the process group — gloo on CPU, nccl on GPU —
and each rank trains on its own anchors; rank 0 writes the checkpoint into ``--out``.
``--rank-weights`` makes every rank also write its final student weights to
``rank<r>.safetensors`` there, so the ranks can be compared.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from hir.models.graph import load_snapshot
from hir.models.sampler import SamplerConfig
from hir.models.trainer import (
    CheckpointMismatch,
    TrainConfig,
    Trainer,
    encoder_config_for,
    read_world_knowledge,
)
from safetensors.torch import save_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = TrainConfig()
    parser.add_argument("--snapshot", required=True, help="graph_snapshot folder (nodes.parquet, edges.parquet, meta.json)")
    parser.add_argument("--out", required=True, help="checkpoint folder (resumed when it holds a checkpoint)")
    parser.add_argument("--world-knowledge", default="", help="world_knowledge.parquet (optional)")
    parser.add_argument("--steps", type=int, default=d.steps)
    parser.add_argument("--batch", type=int, default=d.batch_size, help="positive edges per step and rank")
    parser.add_argument("--lr", type=float, default=d.lr)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--coarse", type=int, default=d.coarse)
    parser.add_argument("--fine", type=int, default=d.fine)
    parser.add_argument("--broad-tokens", type=int, default=64)
    parser.add_argument("--narrow-tokens", type=int, default=16)
    parser.add_argument("--checkpoint-every", type=int, default=d.checkpoint_every)
    parser.add_argument("--log-every", type=int, default=d.log_every)
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--backend", default="", help="dense or flex (default: flex on GPU, dense on CPU)")
    parser.add_argument("--warm-start", default="", help="checkpoint folder to fine-tune from")
    parser.add_argument("--finetune-steps", type=int, default=d.finetune_steps)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads per process")
    parser.add_argument("--rank-weights", action="store_true", help="every rank writes rank<r>.safetensors")


def _setup() -> tuple[int, int, torch.device]:
    """Join the process group when launched by torchrun; return (rank, world size, device)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{local}") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if world > 1:
        dist.init_process_group("nccl" if cuda else "gloo")
        return dist.get_rank(), world, device
    return 0, 1, device


def build_trainer(args: argparse.Namespace, device: torch.device) -> Trainer:
    graph = load_snapshot(args.snapshot)
    wk = read_world_knowledge(args.world_knowledge, graph.entity_id) if args.world_knowledge else None
    backend = args.backend or ("flex" if device.type == "cuda" else "dense")
    config = TrainConfig(
        steps=args.steps, batch_size=args.batch, lr=args.lr, coarse=args.coarse, fine=args.fine,
        checkpoint_every=args.checkpoint_every, log_every=args.log_every, seed=args.seed, backend=backend,
        warm_start=args.warm_start, finetune_steps=args.finetune_steps,
    )
    encoder = encoder_config_for(graph, args.dim, args.layers, args.heads, wk_dim=0 if wk is None else int(wk.shape[1]))
    sampler = SamplerConfig(broad_tokens=args.broad_tokens, narrow_tokens=args.narrow_tokens)
    return Trainer(graph, config, encoder, sampler, args.out, wk=wk, device=device, log=_printer())


def _printer():
    rank = int(os.environ.get("RANK", "0"))

    def log(record: dict) -> None:
        if rank == 0:
            print(json.dumps({k: round(v, 5) if isinstance(v, float) else v for k, v in record.items()}), flush=True)

    return log


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hir.models.train_ddp", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rank, world, device = _setup()
    try:
        trainer = build_trainer(args, device)
        result = trainer.fit()
        if args.rank_weights:
            weights = {k: v.detach().cpu().contiguous() for k, v in trainer.student.state_dict().items()}
            save_file(weights, str(Path(args.out) / f"rank{rank}.safetensors"))
        if rank == 0:
            print(json.dumps({"done": result.step, "world_size": world, "checkpoint": str(result.checkpoint), "parameters": result.parameters}))
    except (CheckpointMismatch, FileNotFoundError) as exc:
        print(f"train_ddp: {exc}", file=sys.stderr)
        return 2
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
