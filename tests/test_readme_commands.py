"""The README's commands, run as written from a shell whose PATH lacks the virtual environment.

One small pipeline (``make run`` with the settings of :data:`hir.cli.bench.faults.SMALL_RUN`,
:func:`conftest.small_pipeline`) is shared by the module. ``make ui`` must serve the asset graph, ``make serve`` must answer
``POST /get-online-features``, and every row of the README's "Command line" table runs once: the
table is parsed, each placeholder (``USER_KEY``, ``N``, …) is filled from :func:`fills`, an
optional ``[…]`` group is kept when its placeholders are filled (or it has none) and dropped
otherwise. A new command or placeholder in the README fails here until the test knows it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from conftest import REPO
from hir.cli.bench.faults import SMALL_RUN
from hir.cli.bench.feast import free_port, post_online
from user_setup import HIR, serving, write_events_only

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(Path(sys.prefix).resolve() != (REPO / ".venv").resolve(),
                       reason="the README's make targets use the project's .venv; run under .venv/bin/python"),
    pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed"),
]

PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]*…?$")
LONG_RUNNING = {"ui", "serve"}  # servers: started, checked, stopped


def readme_commands() -> dict[str, str]:
    """The "Command line" table of README.md: sub-command name → its usage as written."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Command line", 1)[1].split("\n## ", 1)[0]
    usages = re.findall(r"^\| `(hir [^`]+)` \|", section, flags=re.MULTILINE)
    return {usage.split()[1]: usage for usage in usages}


def render(usage: str, values: dict[str, str | list[str]]) -> list[str]:
    """``usage`` as an argv: placeholders replaced by ``values``; an optional ``[…]`` group kept
    when all its placeholders have values (or it has none), dropped otherwise."""
    argv = []
    for group, plain in re.findall(r"\[([^\]]*)\]|(\S+)", usage):
        words = (group or plain).split()
        holes = [w for w in words if PLACEHOLDER.match(w)]
        if group and any(h not in values for h in holes):
            continue
        for word in words:
            if PLACEHOLDER.match(word):
                assert word in values, f"README's `{usage}`: the test has no value for {word}"
                value = values[word]
                argv += value if isinstance(value, list) else [value]
            else:
                argv.append(word)
    return argv


@pytest.fixture(scope="module")
def shell(small_pipeline) -> dict:
    """The shared small pipeline (``make run`` once into a fresh data home, from a PATH without the
    environment; :func:`conftest.small_pipeline`)."""
    return small_pipeline


def fills(shell: dict) -> dict[str, dict[str, str | list[str]]]:
    """Per sub-command, the value of each placeholder the test fills (a real small input)."""
    return {
        "run": {"KIND": "csv", "P": str(write_events_only(shell["root"] / "shop"))},
        "ui": {"N": str(free_port())},
        "lookup": {"ENTITY_TYPE": "user", "KEY…": [shell["user"], "no-such-user"]},
        "serve": {"N": str(free_port())},
        "retrieve": {"USER_KEY": shell["user"]},
        "tokens": {"ENTITY_TYPE": "user", "KEY": shell["user"]},
        "eval": {"DATASET": "synthetic", "LIST": "popularity,cooccurrence", "N": "1"},  # every baseline: hir eval's own tests
        "bench": {"NAME": ["synthetic", "--events", "50000"]},  # flags after NAME go to the benchmark
    }


def _hir(shell: dict, argv: list[str], home: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(shell["env"], HIR_DATA_HOME=str(home or shell["home"]))
    return subprocess.run([str(HIR), *argv[1:]], cwd=shell["root"], env=env, capture_output=True, text=True, timeout=900)


def _asset_keys(port: int) -> set[str]:
    body = json.dumps({"query": "{ assetNodes { assetKey { path } } }"}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return {"/".join(n["assetKey"]["path"]) for n in json.loads(resp.read())["data"]["assetNodes"]}


def _assert_ui(port: int) -> None:
    assert {"events", "world_knowledge", "hir_encoder", "bom_tokens", "feast_online", "evaluation_report"} <= _asset_keys(port)


def _assert_serves(port: int, user: str) -> None:
    got = post_online(port, {"features": ["user_features:hir_embedding"], "entities": {"user_key": [user]}})
    names = got["metadata"]["feature_names"]
    embedding = got["results"][names.index("hir_embedding")]["values"][0]
    assert len(embedding) == int(SMALL_RUN["HIR_TRAIN_DIM"])


def test_the_readme_lists_the_commands_the_test_knows(shell):
    assert set(readme_commands()) == set(fills(shell)), "README's Command line table and this test disagree"


def test_make_ui_serves_the_asset_graph(shell):
    port = free_port()
    env = dict(shell["env"], HIR_UI_PORT=str(port))
    with serving(["make", "ui"], env, f"http://127.0.0.1:{port}/server_info", shell["root"] / "make_ui.log", cwd=REPO):
        _assert_ui(port)


def test_make_serve_answers_get_online_features(shell):
    port = free_port()
    env = dict(shell["env"], HIR_FEAST_PORT=str(port))
    with serving(["make", "serve"], env, f"http://127.0.0.1:{port}/health", shell["root"] / "make_serve.log", cwd=REPO):
        _assert_serves(port, shell["user"])


@pytest.mark.parametrize("name", sorted(readme_commands()))
def test_command_line_table_row_runs_as_written(shell, name):
    argv = render(readme_commands()[name], fills(shell)[name])
    if name in LONG_RUNNING:
        port = int(argv[argv.index("--port") + 1])
        url = f"http://127.0.0.1:{port}/" + ("server_info" if name == "ui" else "health")
        env = dict(shell["env"], HIR_DATA_HOME=str(shell["home"]))
        with serving([str(HIR), *argv[1:]], env, url, shell["root"] / f"{name}.log", cwd=shell["root"]):
            _assert_ui(port) if name == "ui" else _assert_serves(port, shell["user"])
        return
    home = shell["root"] / "csv_home" if name == "run" else None  # a second source gets its own data home
    done = _hir(shell, argv, home)
    assert done.returncode == 0, f"{' '.join(argv)}\n{done.stderr[-4000:]}"
    CHECKS[name](done.stdout, shell)


def _check_run(out: str, shell: dict) -> None:
    import duckdb

    with duckdb.connect(str(shell["root"] / "csv_home" / "warehouse.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM events").fetchone()[0] > 1000


def _check_lookup(out: str, shell: dict) -> None:
    rows = json.loads(out.strip().splitlines()[-1])["rows"]
    assert [r["found"] for r in rows] == [True, False]


def _check_retrieve(out: str, shell: dict) -> None:
    lines = out.splitlines()
    assert lines[0].startswith(f"user {shell['user']}: top 20 product")  # the type the evaluation ranks
    assert sum(line.lstrip().startswith("1. product") for line in lines) == 1
    assert any(line.startswith("       ") for line in lines)  # --explain: matched tokens under each result


def _check_tokens(out: str, shell: dict) -> None:
    assert out.startswith(f"user {shell['user']} ") and "L1:" in out


def _check_eval(out: str, shell: dict) -> None:
    report = json.loads(out.strip().splitlines()[-1])
    assert report["dataset"] == "synthetic" and "recall@10" in report["hir"]["hir"] and report["baselines"]


def _check_bench(out: str, shell: dict) -> None:
    assert json.loads(out.strip().splitlines()[-1])["events"] > 0


CHECKS = {"run": _check_run, "lookup": _check_lookup, "retrieve": _check_retrieve, "tokens": _check_tokens,
          "eval": _check_eval, "bench": _check_bench}
