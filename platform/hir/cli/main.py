"""The ``hir`` command line.

``run``, ``ui`` and ``bench`` live here; every other command is a module in ``hir.cli.commands``
exposing ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``, found at start-up.
A user mistake ends with one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import signal
import sys
import threading
from pathlib import Path

from hir.errors import USER_ERRORS, SettingsError
from hir.settings import Settings


def _apply_overrides(args: argparse.Namespace) -> None:
    """Command-line flags become ``HIR_*`` variables, so every process started from here (the
    Dagster webserver, Feast's server, a benchmark's workers) sees the same settings."""
    for flag, var in (("source", "HIR_SOURCE"), ("path", "HIR_SOURCE_PATH"), ("data_home", "HIR_DATA_HOME"),
                      ("events", "HIR_SYNTHETIC_EVENTS")):
        value = getattr(args, flag, None)
        if value:
            os.environ[var] = str(value)
    if getattr(args, "path", None):
        os.environ["HIR_SOURCE_PATH"] = os.path.abspath(args.path)


def _cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    from hir.cli.runner import run_pipeline

    return run_pipeline(settings, partition=args.partition, ingest_only=args.ingest_only)


def _cmd_ui(args: argparse.Namespace, settings: Settings) -> int:
    import subprocess

    from hir.instance import prepare

    prepare(settings)
    workspace = str(Path(__file__).resolve().parents[3] / "workspace.yaml")
    host, port = args.host or settings.ui_host, str(args.port or settings.ui_port)
    # `python -m dagster` of this interpreter: the environment's bin folder need not be on PATH.
    cmd = [sys.executable, "-m", "dagster", "dev", "-w", workspace, "-h", host, "-p", port]
    print(f"hir ui: http://{host}:{port} (DAGSTER_HOME={os.environ['DAGSTER_HOME']})", flush=True)
    return subprocess.call(cmd)


def _bench_names() -> list[str]:
    import hir.cli.bench

    return sorted(m.name for m in pkgutil.iter_modules(hir.cli.bench.__path__) if not m.name.startswith("_"))


def _cmd_bench(args: argparse.Namespace, settings: Settings, extra: list[str]) -> int:
    if args.name not in _bench_names():
        raise SettingsError(f"unknown benchmark {args.name!r}; choose one of {', '.join(_bench_names())}")
    module = importlib.import_module(f"hir.cli.bench.{args.name}")
    parser = argparse.ArgumentParser(prog=f"hir bench {args.name}", description=module.__doc__)
    module.add_arguments(parser)
    bench_args = parser.parse_args(extra)
    result = module.run(bench_args, settings)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>28}: {value}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    import hir.cli.commands

    parser = argparse.ArgumentParser(prog="hir", description="Hierarchical Interest Representation for ads and recommendation.")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="materialise the whole pipeline on a source (default: the synthetic ecosystem)")
    run.add_argument("--source", help="source kind: synthetic, taobao_userbehavior, taobao_ads, movielens, amazon_seq, csv")
    run.add_argument("--path", help="input file or folder for the real-data sources")
    run.add_argument("--partition", help="day to materialise (YYYY-MM-DD); default: the newest complete one")
    run.add_argument("--events", type=int, help="synthetic events to generate (default HIR_SYNTHETIC_EVENTS)")
    run.add_argument("--ingest-only", action="store_true", help="stop after ingest and world knowledge")
    run.add_argument("--data-home", help="data home (default HIR_DATA_HOME or ./.hir)")
    run.set_defaults(func=_cmd_run)

    ui = sub.add_parser("ui", help="start the Dagster UI on 127.0.0.1")
    ui.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    ui.add_argument("--port", type=int, help="port (default HIR_UI_PORT or 3000)")
    ui.add_argument("--data-home")
    ui.set_defaults(func=_cmd_ui)

    bench = sub.add_parser("bench", help="run a benchmark; flags after NAME go to the benchmark")
    bench.add_argument("name", help="benchmark name")
    bench.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    bench.set_defaults(func=_cmd_bench)

    for info in pkgutil.iter_modules(hir.cli.commands.__path__):
        module = importlib.import_module(f"hir.cli.commands.{info.name}")
        cmd = sub.add_parser(info.name, help=module.HELP, description=module.__doc__)
        module.add_arguments(cmd)
        cmd.set_defaults(func=module.run)
    return parser


def _stoppable() -> None:
    """Give SIGINT and SIGTERM back their power to stop the command where its parent took it away.

    A shell without job control starts a background command (``hir run &`` in a script) with SIGINT
    ignored, and Dagster's in-process runs give SIGTERM whatever SIGINT has, so such a ``hir`` would
    ignore ``kill`` once it had run a job, and pass the ignored SIGTERM on to every process it starts
    (``hir ui``'s ``dagster dev``, a test suite's servers).
    """
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _stoppable()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "bench":
        parser.error(f"unrecognised arguments: {' '.join(extra)}")
    try:
        _apply_overrides(args)
        settings = Settings.from_env()  # the one read of the environment in this process
        code = args.func(args, settings, extra) if args.command == "bench" else args.func(args, settings)
    except USER_ERRORS as exc:
        print(f"hir {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"hir {args.command}: interrupted", file=sys.stderr)
        return 130
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
