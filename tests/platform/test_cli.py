"""`hir run` ingests into the data home, records runs in its Dagster instance, and reports mistakes in one line."""

import duckdb

from hir.cli import main


def test_run_ingest_only_records_runs(data_home, monkeypatch, capsys):
    monkeypatch.setenv("HIR_SYNTHETIC_EVENTS", "20000")
    assert main(["run", "--ingest-only"]) == 0
    con = duckdb.connect(str(data_home / "warehouse.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM events").fetchone()[0] > 15000
    con.close()
    import dagster as dg

    with dg.DagsterInstance.from_config(str(data_home / "dagster")) as instance:
        runs = instance.get_runs()
    assert len(runs) == 1 and runs[0].job_name == "ingest_job"
    assert "telemetry" in (data_home / "dagster" / "dagster.yaml").read_text()


def test_user_mistake_is_one_line(data_home, capsys):
    assert main(["run", "--source", "movielens", "--path", str(data_home / "missing"), "--ingest-only"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("hir run: ") and "Traceback" not in "\n".join(err)
    assert main(["run", "--source", "bogus", "--ingest-only"]) == 2
    assert "unknown source kind 'bogus'" in capsys.readouterr().err
