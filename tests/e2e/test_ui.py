"""The real Dagster UI: start it, launch the default job over GraphQL, look at the result in Chromium."""

import json
import os
import shutil
import time
import urllib.request
from pathlib import Path

import pytest
from hir.cli.bench.faults import run_env
from hir.cli.bench.feast import free_port
from user_setup import HIR, serving, without_environment_on_path

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
PARTITION = "2026-01-26"  # newest complete day of the 28-day synthetic default (1 validation + 1 test day after it)

LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}"""
IN_PROCESS = {"execution": {"config": {"in_process": {}}}}  # multi_or_in_process_executor's other choice
STATUS = "query Status($id: ID!) { runOrError(runId: $id) { __typename ... on Run { status } } }"

# The README test's small pipeline (every stage has data) and its two cheap baselines: the test is
# about the UI, and the default model and baselines made the run 10 of CI's 25 minutes.
SMALL_EVALUATION = {"HIR_EVAL_BASELINES": "popularity,cooccurrence"}


def _graphql(port: int, query: str, variables: dict) -> dict:
    body = json.dumps({"query": query, "variables": variables}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())["data"]


@pytest.fixture
def dagster_ui(data_home):
    """`hir ui` as the user starts it (the environment's console script, its bin folder not on PATH)."""
    env = without_environment_on_path(run_env(data_home, SMALL_EVALUATION))  # no DAGSTER_HOME: `hir ui` puts it in the data home
    port = free_port()
    with serving([str(HIR), "ui", "--port", str(port)], env, f"http://127.0.0.1:{port}/server_info",
                 data_home / "dagster_dev.log", cwd=data_home):
        yield port


def _browser(tmp_path):
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                 "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1600,1000", f"--user-data-dir={tmp_path / 'chromium'}"):
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))


def _dismiss_welcome(driver) -> None:
    """Close Dagster's first-visit community dialog, which would cover the screenshots."""
    time.sleep(2)
    for button in driver.find_elements("xpath", "//button[normalize-space()='Skip']"):
        button.click()
        time.sleep(1)


def _wait_for_text(driver, *texts: str, timeout: float = 60) -> str:
    """The page's text once every one of `texts` is on it (the UI fills sections in as their queries return)."""
    deadline = time.monotonic() + timeout
    body = ""
    while time.monotonic() < deadline:
        body = driver.find_element("tag name", "body").text
        if all(text in body for text in texts):
            return body
        time.sleep(1)
    missing = [text for text in texts if text not in body]
    raise AssertionError(f"{missing!r} not on the page; it shows: {body[:500]!r}")


def _launch_and_wait(port: int, data_home: Path, run_config: dict, assets: list[str] | None = None) -> str:
    """Launch ``hir_job`` on the test's partition over GraphQL (only ``assets`` when given); the run's
    id once it has succeeded."""
    selector = {"repositoryLocationName": "hir", "repositoryName": "__repository__", "jobName": "hir_job"}
    if assets:
        selector["assetSelection"] = [{"path": [name]} for name in assets]
    params = {"selector": selector, "runConfigData": run_config,
              "executionMetadata": {"tags": [{"key": "dagster/partition", "value": PARTITION}]}}
    launched = _graphql(port, LAUNCH, {"params": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]
    deadline = time.monotonic() + 600
    status = "QUEUED"
    while time.monotonic() < deadline and status not in ("SUCCESS", "FAILURE", "CANCELED"):
        time.sleep(3)
        status = _graphql(port, STATUS, {"id": run_id})["runOrError"]["status"]
    assert status == "SUCCESS", (data_home / "dagster_dev.log").read_text()[-4000:]
    return run_id


@pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason="Debian chromium/chromedriver absent (make test installs them)")
def test_default_job_runs_and_shows_in_the_ui(dagster_ui, tmp_path, data_home):
    port = dagster_ui
    # The whole job in the run's own process: with a process per step this small pipeline's run took
    # 3 min 43 s on an idle machine, in one process 1 min 13 s beside two training jobs (each of its
    # 20 steps' processes imports torch, Dagster and the definitions before it starts) ...
    run_id = _launch_and_wait(port, data_home, IN_PROCESS)
    # ... and a process per step is the launchpad's default, so one step runs that way too: its
    # process rebuilds the definitions and settings and reads the upstream assets the first run wrote.
    _launch_and_wait(port, data_home, {}, assets=["evaluation_report"])

    driver = _browser(tmp_path)
    try:
        driver.get(f"http://127.0.0.1:{port}/asset-groups")
        graph = _wait_for_text(driver, "world_knowledge")
        _dismiss_welcome(driver)
        for group in ("ingest", "graph", "training", "tokens", "serving", "evaluation"):
            assert group in graph.splitlines()
        driver.save_screenshot(str(tmp_path / "asset_graph.png"))
        driver.get(f"http://127.0.0.1:{port}/locations/hir/asset-groups/training")
        training = _wait_for_text(driver, "entity_embeddings")
        assert "hir_encoder" in training
        driver.save_screenshot(str(tmp_path / "training_group.png"))
        driver.get(f"http://127.0.0.1:{port}/assets/events")
        # The metadata arrives after the page's frame, so wait for it rather than for the heading.
        _wait_for_text(driver, "Latest materialization", "Row count", "Interactions: impression, click")
        driver.save_screenshot(str(tmp_path / "events_asset.png"))
        driver.get(f"http://127.0.0.1:{port}/runs/{run_id}")
        assert "Success" in _wait_for_text(driver, "Success")
        driver.save_screenshot(str(tmp_path / "run.png"))
    finally:
        driver.quit()
    assert (tmp_path / "asset_graph.png").stat().st_size > 10_000
    if os.environ.get("HIR_UI_SCREENSHOTS"):  # where README's screenshots come from
        for name in ("asset_graph.png", "training_group.png"):
            shutil.copy(tmp_path / name, Path(os.environ["HIR_UI_SCREENSHOTS"]) / name)
