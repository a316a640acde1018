"""Train a partition's HIR encoder on one process or several under ``torchrun``, from the settings.

    python -m hir.training.ddp PARTITION
    torchrun --nproc_per_node=2 -m hir.training.ddp PARTITION     (or platform/deploy/torchrun.sh)

It reads the same ``HIR_*`` settings, snapshot and world knowledge as the ``hir_encoder`` asset
(:func:`hir.training.inputs.training_run`) and checkpoints into the folder the asset resumes from,
so materialising the partition afterwards publishes this run's model instead of training again.
Under ``torchrun`` (``WORLD_SIZE`` > 1) it joins the process group — gloo on CPU, nccl on GPU — and
each rank trains on its own anchors; rank 0 writes the checkpoint. ``--rank-weights`` makes every
rank also write its final student weights to ``rank<r>.safetensors`` beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from hir.errors import USER_ERRORS
from hir.settings import Settings


def _setup():
    """Join the process group when launched by torchrun; return (rank, world size, device)."""
    import torch
    import torch.distributed as dist

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


def _printer(rank: int):
    def log(record: dict) -> None:
        if rank == 0:
            print(json.dumps({k: round(v, 5) if isinstance(v, float) else v for k, v in record.items()}), flush=True)

    return log


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hir.training.ddp", description=__doc__.splitlines()[0])
    parser.add_argument("partition", help="day YYYY-MM-DD whose graph_snapshot to train on")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads per process")
    parser.add_argument("--rank-weights", action="store_true", help="every rank writes rank<r>.safetensors")
    args = parser.parse_args(argv)

    import torch
    import torch.distributed as dist
    from safetensors.torch import save_file

    from hir.models.checkpoint import CheckpointMismatch
    from hir.models.trainer import Trainer
    from hir.training.inputs import training_run

    torch.set_num_threads(args.threads)
    settings = Settings.from_env()  # the one read of the environment in this process
    rank, world, device = _setup()
    try:
        run = training_run(settings, args.partition, device.type)
        trainer = Trainer(run.graph, *run.configs, run.work, wk=run.wk, device=device, log=_printer(rank))
        result = trainer.fit()
        if args.rank_weights:
            weights = {k: v.detach().cpu().contiguous() for k, v in trainer.student.state_dict().items()}
            save_file(weights, str(Path(run.work) / f"rank{rank}.safetensors"))
        if rank == 0:
            print(json.dumps({"done": result.step, "world_size": world, "checkpoint": str(result.checkpoint),
                              "parameters": result.parameters}))
    except (CheckpointMismatch, *USER_ERRORS) as exc:
        print(f"hir.training.ddp: {exc}", file=sys.stderr)
        return 2
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
