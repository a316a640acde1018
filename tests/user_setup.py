"""What a new user starts from: a shell whose PATH lacks the virtual environment, servers started
the way the README says (and stopped with their whole process group), and an event log that
arrives without a catalogue."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ENV_BIN = Path(sys.executable).parent  # the environment's bin folder (.venv/bin under `make test`)
HIR = ENV_BIN / "hir"  # the console script `make` runs

EVENTS_ONLY_MAPPING = """\
events:
  - file: events.csv
    src: {type: user, column: user}
    dst: {type: item, column: item}
    event_type: {column: behavior, allowed: [view, cart, transaction]}
    ts: {column: ts, format: unix_s}
"""


def without_environment_on_path(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the environment's bin folder removed from ``PATH`` and no ``VIRTUAL_ENV``:
    nothing of the environment can be found by bare name."""
    own = ENV_BIN.resolve()
    kept = [p for p in env.get("PATH", os.defpath).split(os.pathsep) if p and Path(p).resolve() != own]
    out = {k: v for k, v in env.items() if k != "VIRTUAL_ENV"}
    out["PATH"] = os.pathsep.join(kept)
    return out


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5):
            return True
    except urllib.error.HTTPError:
        return True  # the server is up, whatever it thinks of this path
    except (OSError, ConnectionError):
        return False


@contextlib.contextmanager
def serving(cmd: list[str], env: dict[str, str], url: str, log: Path, cwd: Path | None = None, timeout: float = 240,
            preexec_fn=None):
    """Run ``cmd`` in its own process group until ``url`` answers; yield the process, then stop
    the group (SIGTERM, SIGKILL after 30 s). Raises ``AssertionError`` with the log's tail when the
    command exits first or ``url`` does not answer within ``timeout`` seconds. ``preexec_fn`` runs
    in the child before ``cmd`` (``subprocess.Popen``'s)."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=preexec_fn)
        try:
            deadline = time.monotonic() + timeout
            while not _answers(url):
                if proc.poll() is not None or time.monotonic() > deadline:
                    state = f"exited with {proc.returncode}" if proc.poll() is not None else f"no answer in {timeout:.0f}s"
                    raise AssertionError(f"{' '.join(map(str, cmd))}: {state}\n{log.read_text()[-3000:]}")
                time.sleep(1)
            yield proc
        finally:
            _stop_group(proc)


def _stop_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def write_events_only(folder: Path, users: int = 120, items: int = 40, days: int = 8, seed: int = 0) -> Path:
    """An event log without any catalogue (user, item, behaviour, unix seconds from 2015-05-01
    UTC, as the Retailrocket funnel log) and its events-only ``mapping.yaml``, in ``folder``.

    Each user views three items a day from one of four item blocks and carts and buys about a
    third of them. Returns ``folder``.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    start = 1_430_438_400
    rows = ["user,item,behavior,ts"]
    for user in range(users):
        block = rng.integers(4) * (items // 4)
        for day in range(days):
            for item in block + rng.choice(items // 4, size=3, replace=False):
                t = start + day * 86_400 + int(rng.integers(80_000))
                rows.append(f"u{user},i{item},view,{t}")
                if rng.random() < 0.3:
                    rows += [f"u{user},i{item},cart,{t + 60}", f"u{user},i{item},transaction,{t + 120}"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "events.csv").write_text("\n".join(rows) + "\n")
    (folder / "mapping.yaml").write_text(EVENTS_ONLY_MAPPING)
    return folder
