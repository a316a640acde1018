"""``hir run``: ingest, then the whole pipeline for one daily partition, in process.

Runs go to the Dagster instance under the data home, so ``hir ui`` shows them. Progress is one
line per step; a user mistake inside a step comes back as that mistake, not a traceback.
"""

from __future__ import annotations

import logging
import os
import time
from datetime import datetime, timedelta, timezone

import dagster as dg
from rich.console import Console

from hir.errors import USER_ERRORS, SourceError
from hir.settings import Settings

_console = Console(stderr=True, highlight=False)


class _ProgressHandler(logging.Handler):
    """Prints a line when a step starts, materialises an asset, passes a check or fails."""

    def __init__(self) -> None:
        super().__init__()
        self.started: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "dagster_meta", {}).get("dagster_event")
        if event is None:
            return
        step, kind = event.step_key or "", event.event_type_value
        if kind == "STEP_START":
            self.started[step] = time.monotonic()
            _console.print(f"[bold cyan]▶[/] {step}")
        elif kind == "ASSET_MATERIALIZATION":
            _console.print(f"  [green]●[/] {event.asset_key.to_user_string()}")
        elif kind == "ASSET_CHECK_EVALUATION":
            data = event.event_specific_data
            mark = "[green]✓[/]" if data.passed else "[red]✗[/]"
            _console.print(f"  {mark} check {data.check_name}")
        elif kind == "STEP_SUCCESS":
            elapsed = time.monotonic() - self.started.get(step, time.monotonic())
            _console.print(f"[green]✔[/] {step} [dim]{elapsed:.1f}s[/]")
        elif kind == "STEP_FAILURE":
            _console.print(f"[red]✘ {step}[/]")


@dg.logger(description="One line per step, asset and check, for `hir run`.")
def progress_logger(_init_context) -> logging.Logger:
    log = logging.getLogger("hir.progress")
    log.setLevel(logging.DEBUG)  # step events are logged at DEBUG
    log.propagate = False
    if not log.handlers:
        log.addHandler(_ProgressHandler())
    return log


def newest_complete_partition(settings: Settings) -> str | None:
    """The newest day D whose validation and test windows after cut-off end-of-D hold data."""
    from hir.graph.warehouse import connect

    with connect(settings.warehouse_path, read_only=True) as con:
        last = con.execute("SELECT max(ts) FROM events").fetchone()[0]
    if last is None:
        return None
    data_end = datetime(last.year, last.month, last.day, tzinfo=timezone.utc) + timedelta(days=1)
    cutoff = data_end - timedelta(days=settings.val_days + settings.test_days)
    day = (cutoff - timedelta(seconds=1)).date()
    start = datetime.strptime(settings.partition_start_date, "%Y-%m-%d").date()
    return day.isoformat() if day >= start else None


def _user_error(exc: BaseException) -> BaseException | None:

    seen = exc
    while seen is not None:
        if isinstance(seen, USER_ERRORS):
            return seen
        for info in getattr(seen, "user_code_process_error_infos", None) or []:
            found = _user_error_from_info(info, USER_ERRORS)
            if found is not None:
                return found
        seen = getattr(seen, "user_exception", None) or seen.__cause__
    return None


def _user_error_from_info(info, kinds: tuple[type[BaseException], ...]) -> BaseException | None:
    """Rebuild a user mistake from Dagster's serialised error chain (what is left once retries run out)."""
    by_name = {kind.__name__: kind for kind in kinds}
    while info is not None:
        if info.cls_name in by_name:
            return by_name[info.cls_name](info.message.split(": ", 1)[-1].strip())
        info = info.cause
    return None


def _execute(job: dg.JobDefinition, instance: dg.DagsterInstance, **kwargs) -> None:
    try:
        result = job.execute_in_process(
            instance=instance, run_config={"loggers": {"progress_logger": {}}}, **kwargs
        )
    except Exception as exc:  # a step failed; surface a user mistake as itself
        user = _user_error(exc)
        if user is not None:
            raise user from None
        raise
    if not result.success:
        raise SourceError(f"run {result.run_id} failed; see `hir ui` for its logs")


def _run_pid(instance: dg.DagsterInstance, run_id: str) -> int | None:
    """The process id recorded by the first event of ``run_id`` that carries one."""
    for entry in instance.all_logs(run_id):
        pid = getattr(entry.dagster_event, "pid", None)
        if pid:
            return int(pid)
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def release_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Fail the runs left unfinished by a killed process and free their pool slots.

    A ``hir run`` killed with SIGKILL (or a lost machine) never reports its end, so its run stays
    STARTED and keeps its ``duckdb_writer`` slot: every later run would wait for it forever. A run
    whose recorded process no longer exists on this machine is marked failed and its slots are
    freed. Returns the run ids released.
    """
    released = []
    live = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
    for record in instance.get_run_records(dg.RunsFilter(statuses=live)):
        run = record.dagster_run
        pid = _run_pid(instance, run.run_id)
        if pid is None or pid == os.getpid() or _alive(pid):
            continue
        instance.report_run_failed(run, f"the process running it (pid {pid}) is gone")
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        released.append(run.run_id)
    return released


def run_pipeline(settings: Settings, partition: str | None = None, ingest_only: bool = False,
                 only: list[str] | None = None) -> int:
    """Ingest, then materialise every partitioned asset (or those named in ``only``) for ``partition``
    (default: the newest complete one)."""
    from hir.definitions import build_definitions
    from hir.errors import SettingsError
    from hir.instance import prepare
    from hir.partitions import daily_partitions

    if partition is not None and not daily_partitions(settings).has_partition_key(partition):
        # before any work: Dagster would refuse it only after ingest, with a traceback
        raise SettingsError(f"--partition {partition!r}: not a day (YYYY-MM-DD) from {settings.partition_start_date} on")
    prepare(settings)
    defs = build_definitions(settings, loggers={"progress_logger": progress_logger})
    with dg.DagsterInstance.get() as instance:
        _console.print(f"[bold]hir run[/] source={settings.source} data home={settings.data_home}")
        for run_id in release_dead_runs(instance):
            _console.print(f"[yellow]released[/] run {run_id}: its process was killed")
        _execute(defs.resolve_job_def("ingest_job"), instance)
        if ingest_only:
            return 0
        job = defs.resolve_job_def("hir_job")
        graph = defs.resolve_asset_graph()
        partitioned = [k for k in graph.get_all_asset_keys() if graph.get(k).partitions_def is not None
                       and (only is None or k.to_user_string() in only)]
        if not partitioned:
            return 0
        partition = partition or newest_complete_partition(settings)
        if partition is None:
            raise SourceError("no complete daily partition: the events do not cover a cut-off plus its windows")
        _console.print(f"[bold]partition[/] {partition} (cut-off {partition} 24:00 UTC)")
        _execute(job, instance, partition_key=partition, asset_selection=list(partitioned))
    return 0
