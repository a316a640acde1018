"""`hir bench faults --json` prints one JSON object with the figures issue 11 names (no kills here:
the kill path is tests/reliability/test_kill_recovery.py)."""

import json

import pytest
from hir.cli import main as cli


@pytest.mark.slow
def test_bench_faults_json(data_home, capsys):
    code = cli.main(["bench", "faults", "--json", "--steps", "", "--fuzz-cases", "10", "--row-cases", "120", "--clients", "2",
                     "--seconds", "1"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0
    assert {"kills", "recovered", "outputs_equal", "fuzz_cases", "crashes", "rows_lost", "lookup_errors"} <= set(result)
    assert result["kills"] == 0 and result["recovered"] == 0 and result["outputs_equal"] is None
    assert (result["fuzz_cases"], result["input_cases"], result["row_cases"], result["row_batches"]) == (130, 10, 120, 3)
    assert result["crashes"] == 0 and result["rows_lost"] == 0 and result["not_verbatim"] == 0
    assert result["refused"] + result["read"] == 130
    assert result["lookups"] > 0 and result["lookup_errors"] == 0 and result["mixed_answers"] == 0
