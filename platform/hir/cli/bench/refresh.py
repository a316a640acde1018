"""Freshness without full retraining: `hir bench refresh --json`.

Builds two consecutive daily snapshots (day 1 and day 2) and the events of the day after day 2.
The day-1 model is trained from scratch first (untimed: it is yesterday's model). Then day 2 is
trained twice, timed: from scratch (``--steps``) and warm-started from the day-1 checkpoint
(``--finetune-steps``). Each day-2 model's engagement head scores the next day's engagements
(events of a type the head is trained on — a positive funnel weight — between two entities of the
snapshot, each pair once and asked with its own type) against random entities of the true
destination's type; ``warm_new_pair_auc`` keeps the pairs with no edge between them yet:
``time_ratio = warm_s / scratch_s``, target ≤ 0.2 at an AUC no more than 0.01 below scratch.
The scratch run chooses between its training cycles on held-out examples as the product does;
``scratch_cycle_recall`` and ``scratch_selected_cycle`` say what it saw and which cycle it kept.

Both runs train the settings' model and views (width, layers, heads, view sizes: what the
product trains) for the benchmark's step budget (``--steps`` batches of ``--batch`` examples; the
product's own one-epoch budget is a handful of steps on this small graph); the warm start runs the
settings' ``finetune_steps``. A size on the command line replaces the settings' one.

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
    parser.add_argument("--steps", type=int, default=600, help="steps from scratch")
    parser.add_argument("--finetune-steps", type=int, default=0, help="steps of the warm start (0: the settings')")
    parser.add_argument("--batch", type=int, default=64, help="examples per step")
    parser.add_argument("--dim", type=int, default=0, help="encoder width (0: the settings')")
    parser.add_argument("--layers", type=int, default=0, help="encoder layers (0: the settings')")
    parser.add_argument("--heads", type=int, default=0, help="attention heads (0: the settings')")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")


def _synthetic_days(args: argparse.Namespace, home: Path, settings: Settings):
    """Two snapshot folders (day 1, day 2) and the next day's events ``(src, dst, event type)`` (entity ids)."""
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
            "SELECT src, dst, event_type FROM events WHERE ts >= ? AND ts < ?", [day2, day2 + timedelta(days=1)]
        ).fetchall()
    return folders, rows


def _planted_days(args: argparse.Namespace, home: Path):
    from hir.models.planted import EDGE_TYPES, planted_events, write_snapshot

    events = planted_events(users=args.users, items=max(2, args.users // 2), coarse=8, fine_per_coarse=6, events_per_user=20, days=args.days, seed=args.seed)
    end = float(events.ts.max()) + 1
    folders = [write_snapshot(events, end - 2 * DAY, home / "day1"), write_snapshot(events, end - DAY, home / "day2")]
    nxt = events.ts >= end - DAY
    types = [EDGE_TYPES[t] for t in events.edge_type[nxt].tolist()]
    return folders, list(zip(events.src[nxt].tolist(), events.dst[nxt].tolist(), types))


def _training_settings(args: argparse.Namespace, settings: Settings) -> Settings:
    """The settings' training run (the product's model and views) at this benchmark's step budget;
    a size given on the command line replaces the settings' one."""
    sizes = {"finetune_steps": args.finetune_steps, "train_dim": args.dim, "train_layers": args.layers, "train_heads": args.heads}
    return settings.replace(
        train_steps=args.steps, train_batch=args.batch, seed=args.seed, train_checkpoint_every=10 * args.steps,
        **{name: value for name, value in sizes.items() if value},
    )


def _train(args, settings: Settings, graph, out: Path, warm: str = ""):
    """``(seconds, TrainResult)`` of one training run into ``out``."""
    from hir.models.trainer import Trainer
    from hir.training.configs import training_configs

    start = time.perf_counter()
    result = Trainer(graph, *training_configs(_training_settings(args, settings), graph, warm_start=warm), out).fit()
    return time.perf_counter() - start, result


def scored_pairs(graph, events: list[tuple[int, int, str]], weights: dict[str, float], new_only: bool = False):
    """The engagements the benchmark scores: ``(src nodes, dst nodes, edge-type ids)`` int64.

    Of ``events`` (``(src, dst, event type)``, entity ids) it keeps, once each, the engagements the
    head is trained on (a funnel weight of 1 or more in ``weights``: clicks and deeper; views train
    at a lower weight but are not what the benchmark asks about) whose ends are both in ``graph`` —
    with ``new_only``, also no edge between them yet.
    """
    import torch

    trained = {name: i for i, name in enumerate(graph.edge_types) if weights.get(name, 0) >= 1}
    kept = sorted({(s, d, trained[t]) for s, d, t in events if t in trained})
    if not kept:
        return (torch.zeros(0, dtype=torch.int64),) * 3
    src, dst, etype = (torch.tensor(column, dtype=torch.int64) for column in zip(*kept))
    ids, n = graph.entity_id, graph.num_nodes
    si, di = torch.searchsorted(ids, src).clamp_max(ids.numel() - 1), torch.searchsorted(ids, dst).clamp_max(ids.numel() - 1)
    keep = (ids[si] == src) & (ids[di] == dst)
    if new_only:
        keep &= ~torch.isin(si * n + di, graph.csr.rows() * n + graph.csr.indices)
    return si[keep], di[keep], etype[keep]


def engagement_auc(graph, folder: Path, events: list[tuple[int, int, str]], seed: int = 0,
                   weights: dict[str, float] | None = None, new_only: bool = False) -> float | None:
    """AUC of the checkpoint's engagement head on the next day's engagements (:func:`scored_pairs`;
    ``weights`` default to the training default), each scored with its own type against a random
    entity of its destination's type; ``None`` when there is none to score."""
    import torch

    from hir.models.checkpoint import load_model, read_configs
    from hir.models.engagement import auc
    from hir.models.examples import parse_funnel_weights
    from hir.models.inference import embed_all
    from hir.models.model import TrainConfig

    weights = parse_funnel_weights(TrainConfig.funnel_weights) if weights is None else weights
    si, di, etype = scored_pairs(graph, events, weights, new_only)
    if si.numel() == 0:
        return None
    model = load_model(folder, max(1, len(graph.edge_types)))
    emb = embed_all(graph, model, read_configs(folder)[2], backend="dense", batch_size=512).embedding
    gen = torch.Generator().manual_seed(seed)
    fake = torch.empty_like(di)
    for t in graph.node_type[di].unique():
        pool = torch.nonzero(graph.node_type == t).flatten()
        rows = torch.nonzero(graph.node_type[di] == t).flatten()
        fake[rows] = pool[torch.randint(0, pool.numel(), (rows.numel(),), generator=gen)]
    age = torch.zeros(si.numel())
    with torch.no_grad():
        pos = model.engagement(emb[si], emb[di], etype, age)
        neg = model.engagement(emb[si], emb[fake], etype, age)
    return auc(pos, neg)


def run(args: argparse.Namespace, settings: Settings) -> dict:
    import torch

    from hir.models.examples import parse_funnel_weights
    from hir.models.graph import load_snapshot
    from hir.models.model import TrainConfig

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        folders, pairs = _synthetic_days(args, home, settings) if args.graph == "synthetic" else _planted_days(args, home)
        day1, day2 = (load_snapshot(f) for f in folders)
        _train(args, settings, day1, home / "model-day1")
        scratch_s, scratch = _train(args, settings, day2, home / "scratch")
        warm_s, _ = _train(args, settings, day2, home / "warm", warm=str(home / "model-day1"))
        weights = parse_funnel_weights(settings.train_funnel_weights or TrainConfig.funnel_weights)
        scratch_auc, warm_auc, new_auc = (engagement_auc(day2, home / model, pairs, args.seed, weights, new_only)
                                          for model, new_only in (("scratch", False), ("warm", False), ("warm", True)))
    return {
        "scratch_s": round(scratch_s, 2),
        "warm_s": round(warm_s, 2),
        "time_ratio": round(warm_s / scratch_s, 4),
        "scratch_engagement_auc": _rounded(scratch_auc),
        "warm_engagement_auc": _rounded(warm_auc),
        "warm_new_pair_auc": _rounded(new_auc),
        "scratch_cycle_recall": [round(r, 4) for r in scratch.cycle_recall],  # held-out recall after each cycle
        "scratch_selected_cycle": scratch.selected_cycle,  # the cycle the scratch model kept (0: no choice)
        "graph": args.graph,
        "nodes_day2": day2.num_nodes,
        "next_day_edges": len(pairs),
    }


def _rounded(auc: float | None) -> float | None:
    return None if auc is None else round(auc, 4)
