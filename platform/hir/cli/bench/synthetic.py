"""Generate the synthetic ecosystem and report its speed: `hir bench synthetic --events N`."""

from __future__ import annotations

import argparse
import time

from hir.settings import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=10_000_000, help="events to generate")
    parser.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace, settings: Settings) -> dict:
    from hir.graph.sources.synthetic import generate

    settings = settings.replace(seed=args.seed)
    start = time.perf_counter()
    batch = generate(settings, events=args.events)
    seconds = time.perf_counter() - start
    return {"events": len(batch.events), "seconds": round(seconds, 3), "events_per_s": round(len(batch.events) / seconds)}
