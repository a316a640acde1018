"""`hir bench sources`: the adapter reads generated UserBehavior rows and reports a ratio to bare pandas."""

import argparse
import json

from hir.cli.bench.sources import run, write_rows
from hir.cli.main import main
from hir.settings import Settings


def test_generated_rows_all_accepted_and_reported(tmp_path):
    path = tmp_path / "ub.csv"
    write_rows(path, 2_000, seed=3)
    result = run(argparse.Namespace(path=str(path), rows=0, seed=0), Settings.from_env())
    assert result["rows"] == result["accepted"] == 2_000
    assert set(result) == {"rows", "accepted", "seconds", "rows_per_s", "baseline_seconds", "ratio"}
    assert result["ratio"] > 0


def test_cli_prints_one_json_line(tmp_path, capsys):
    path = tmp_path / "ub.csv"
    write_rows(path, 500, seed=1)
    assert main(["bench", "sources", "--json", "--path", str(path)]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"] == 500
