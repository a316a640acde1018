"""Read a UserBehavior-format file through the validating adapter: `hir bench sources --rows N`.

By default the file is ``../shared/data/taobao_userbehavior/UserBehavior_head.csv`` when it exists
(``--path`` names another), else ``--rows`` seeded random rows in the same layout are written to
a temporary file. The baseline, timed in the same run, is a bare ``pandas.read_csv`` of the same
file with no validation; ``ratio`` = adapter seconds / baseline seconds.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from hir.settings import Settings

SHARED_FILE = Path(__file__).resolve().parents[4].parent / "shared" / "data" / "taobao_userbehavior" / "UserBehavior_head.csv"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--path", help="a UserBehavior CSV (default: the shared head file, else generated rows)")
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows to generate when there is no file")
    parser.add_argument("--seed", type=int, default=0)


def write_rows(path: Path, rows: int, seed: int) -> None:
    """``rows`` random UserBehavior rows (ids, pv/cart/fav/buy at 90/5/3/2 %, times in the data set's window)."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "user": rng.integers(1, 1_000_000, rows),
            "item": rng.integers(1, 5_000_000, rows),
            "category": rng.integers(1, 10_000, rows),
            "behavior": rng.choice(["pv", "cart", "fav", "buy"], rows, p=[0.9, 0.05, 0.03, 0.02]),
            "timestamp": rng.integers(1_511_539_200, 1_512_316_800, rows),
        }
    )
    frame.to_csv(path, header=False, index=False)


def _timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def run(args: argparse.Namespace, settings: Settings) -> dict:
    from hir.graph.sources import read_source

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.path) if args.path else SHARED_FILE
        if not args.path and not path.exists():
            path = Path(tmp) / "user_behavior.csv"
            write_rows(path, args.rows, args.seed)
        baseline, _ = _timed(lambda: pd.read_csv(path, header=None))
        seconds, batch = _timed(lambda: read_source("taobao_userbehavior", path, settings))
    return {
        "rows": batch.rows_read,
        "accepted": batch.rows_accepted,
        "seconds": round(seconds, 3),
        "rows_per_s": round(batch.rows_read / seconds),
        "baseline_seconds": round(baseline, 3),
        "ratio": round(seconds / baseline, 2),
    }
