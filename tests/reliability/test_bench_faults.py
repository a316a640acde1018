"""`hir bench faults --json` prints one JSON object with the figures issue 11 names (no kills here:
the kill path is tests/reliability/test_kill_recovery.py)."""

import json

import pytest

from hir import cli


@pytest.mark.slow
def test_bench_faults_json(data_home, capsys):
    code = cli.main(["bench", "faults", "--json", "--steps", "", "--fuzz-cases", "10", "--clients", "2", "--seconds", "1"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0
    assert {"kills", "recovered", "outputs_equal", "fuzz_cases", "crashes", "rows_lost", "lookup_errors"} <= set(result)
    assert result["kills"] == 0 and result["fuzz_cases"] == 10
    assert result["crashes"] == 0 and result["rows_lost"] == 0 and result["lookup_errors"] == 0
    assert result["refused"] + result["read"] == 10 and result["lookups"] > 0
