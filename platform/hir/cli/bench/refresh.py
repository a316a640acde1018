"""Freshness without full retraining: `hir bench refresh --json`.

Builds two consecutive daily snapshots (day 1 and day 2) and the events of the day after day 2.
The day-1 model is trained from scratch first (untimed: it is yesterday's model). Then day 2 is
trained twice, timed: from scratch (``--steps``) and warm-started from the day-1 checkpoint
(``--finetune-steps``). Each day-2 model scores the next day's true edges against random
entities of the same type as the true destination with its engagement head:
``time_ratio = warm_s / scratch_s``, target ≤ 0.2 at an AUC no more than 0.01 below scratch.

Data: the synthetic source and the snapshot SQL (``--graph synthetic``, the default) in a
temporary data home, or a planted graph generated in torch (``--graph planted``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from hir.settings import Settings

DAY = 86_400.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--graph", choices=("synthetic", "planted"), default="synthetic")
    parser.add_argument("--events", type=int, default=100_000, help="synthetic events to generate")
    parser.add_argument("--days", type=int, default=10, help="days of generated events")
    parser.add_argument("--users", type=int, default=1500, help="planted graph users (items = users / 2)")
    parser.add_argument("--steps", type=int, default=150, help="steps from scratch")
    parser.add_argument("--finetune-steps", type=int, default=25, help="steps of the warm start")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")


def _synthetic_days(args: argparse.Namespace, home: Path, settings: Settings):
    """Two snapshot folders (day 1, day 2) and the next day's events ``(src, dst)`` as entity ids."""
    from hir.graph.snapshot import build_snapshot
    from hir.graph.sources.synthetic import generate
    from hir.graph.warehouse import connect, load_batch

    settings = settings.replace(data_home=home, synthetic_days=args.days, seed=args.seed)
    batch = generate(settings, events=args.events)
    with connect(settings.warehouse_path) as con:
        load_batch(con, batch)
    start = datetime.strptime(settings.partition_start_date, "%Y-%m-%d").replace(tzinfo=timezone.utc)
    day2 = start + timedelta(days=args.days - 1)
    day1 = day2 - timedelta(days=1)
    folders = []
    with connect(settings.warehouse_path, read_only=True) as con:
        for cutoff in (day1, day2):
            folder = home / f"snapshot-{cutoff.date()}"
            folder.mkdir()
            build_snapshot(con, cutoff, settings, folder)
            folders.append(folder)
        rows = con.execute(
            "SELECT src, dst FROM events WHERE ts >= ? AND ts < ?", [day2, day2 + timedelta(days=1)]
        ).fetchall()
    return folders, rows


def _planted_days(args: argparse.Namespace, home: Path):
    from hir.models.planted import planted_events, write_snapshot

    events = planted_events(users=args.users, items=max(2, args.users // 2), coarse=8, fine_per_coarse=6, events_per_user=20, days=args.days, seed=args.seed)
    end = float(events.ts.max()) + 1
    folders = [write_snapshot(events, end - 2 * DAY, home / "day1"), write_snapshot(events, end - DAY, home / "day2")]
    nxt = events.ts >= end - DAY
    return folders, list(zip(events.src[nxt].tolist(), events.dst[nxt].tolist()))


def _training_settings(args: argparse.Namespace, settings: Settings) -> Settings:
    """The settings' training run at this benchmark's sizes."""
    return settings.replace(
        train_steps=args.steps, train_batch=args.batch, seed=args.seed, finetune_steps=args.finetune_steps,
        train_checkpoint_every=10 * args.steps, train_dim=args.dim, train_layers=args.layers,
        train_heads=args.heads, train_broad_tokens=48, train_narrow_tokens=12,
    )


def _train(args, settings: Settings, graph, out: Path, warm: str = "") -> float:
    from hir.models.trainer import Trainer
    from hir.training.configs import training_configs

    start = time.perf_counter()
    Trainer(graph, *training_configs(_training_settings(args, settings), graph, warm_start=warm), out).fit()
    return time.perf_counter() - start


def engagement_auc(graph, folder: Path, pairs: list[tuple[int, int]], seed: int = 0) -> float:
    """AUC of the checkpoint's engagement head: next-day edges vs random same-type destinations.

    Pairs whose endpoints are not both in ``graph`` (entities that arrived after the cut-off) are
    skipped; the edge type is the graph's first (the head is asked "any engagement").
    """
    import torch

    from hir.models.checkpoint import load_model, read_configs
    from hir.models.engagement import auc
    from hir.models.inference import embed_all

    ids = graph.entity_id
    src = torch.tensor([p[0] for p in pairs], dtype=torch.int64)
    dst = torch.tensor([p[1] for p in pairs], dtype=torch.int64)
    si, di = torch.searchsorted(ids, src).clamp_max(ids.numel() - 1), torch.searchsorted(ids, dst).clamp_max(ids.numel() - 1)
    known = (ids[si] == src) & (ids[di] == dst)
    si, di = si[known], di[known]
    model = load_model(folder, max(1, len(graph.edge_types)))
    emb = embed_all(graph, model, read_configs(folder)[2], backend="dense", batch_size=512).embedding
    gen = torch.Generator().manual_seed(seed)
    fake = torch.empty_like(di)
    for t in graph.node_type[di].unique():
        pool = torch.nonzero(graph.node_type == t).flatten()
        rows = torch.nonzero(graph.node_type[di] == t).flatten()
        fake[rows] = pool[torch.randint(0, pool.numel(), (rows.numel(),), generator=gen)]
    etype = torch.zeros_like(si)
    age = torch.zeros(si.numel())
    with torch.no_grad():
        pos = model.engagement(emb[si], emb[di], etype, age)
        neg = model.engagement(emb[si], emb[fake], etype, age)
    return auc(pos, neg)


def run(args: argparse.Namespace, settings: Settings) -> dict:
    import torch

    from hir.models.graph import load_snapshot

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        folders, pairs = _synthetic_days(args, home, settings) if args.graph == "synthetic" else _planted_days(args, home)
        day1, day2 = (load_snapshot(f) for f in folders)
        _train(args, settings, day1, home / "model-day1")
        scratch_s = _train(args, settings, day2, home / "scratch")
        warm_s = _train(args, settings, day2, home / "warm", warm=str(home / "model-day1"))
        scratch_auc = engagement_auc(day2, home / "scratch", pairs, args.seed)
        warm_auc = engagement_auc(day2, home / "warm", pairs, args.seed)
    return {
        "scratch_s": round(scratch_s, 2),
        "warm_s": round(warm_s, 2),
        "time_ratio": round(warm_s / scratch_s, 4),
        "scratch_engagement_auc": round(scratch_auc, 4),
        "warm_engagement_auc": round(warm_auc, 4),
        "graph": args.graph,
        "nodes_day2": day2.num_nodes,
        "next_day_edges": len(pairs),
    }
