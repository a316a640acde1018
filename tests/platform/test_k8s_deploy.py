"""The Kubernetes deployment files: the cluster's settings build definitions whose hir_job takes
platform/deploy/k8s-executor.yaml (validated against the job's real config schema, no cluster),
and the Helm values run this repository's code location."""

from pathlib import Path

import dagster as dg
import pytest
import yaml
from hir.definitions import build_definitions
from hir.errors import SettingsError
from hir.jobs import hir_executor
from hir.serving.feast_store import FeastStore
from hir.settings import Settings

pytest.importorskip("dagster_k8s", reason="needs the k8s extra (`make test` installs '.[test,k8s]')")

DEPLOY = Path(__file__).resolve().parents[2] / "platform" / "deploy"
ROOT = DEPLOY.parents[1]


def _yaml(name: str) -> dict:
    return yaml.safe_load((DEPLOY / name).read_text())


@pytest.fixture(scope="module")
def cluster_settings(tmp_path_factory) -> Settings:
    """The settings the hir-settings ConfigMap gives a pod, with a local data home."""
    data = _yaml("hir-settings.yaml")["data"]
    return Settings.from_mapping(data, data_home=tmp_path_factory.mktemp("k8s_home"))


def test_the_configmap_names_real_settings(cluster_settings):
    data = _yaml("hir-settings.yaml")["data"]
    known = {"HIR_" + name.upper() for name in Settings.__dataclass_fields__}
    assert set(data) <= known, set(data) - known
    assert cluster_settings.executor == "k8s" and cluster_settings.online_store == "redis"
    config = FeastStore.from_settings(cluster_settings).repo_config()
    assert config.online_store.connection_string == "redis-master.hir.svc:6379,db=0,ssl=false"


def test_hir_job_takes_the_k8s_executor_run_config(cluster_settings):
    job = build_definitions(cluster_settings).resolve_job_def("hir_job")
    run_config = _yaml("k8s-executor.yaml")
    assert job.executor_def.name == "k8s"
    validated = dg.validate_run_config(job, run_config)
    executor = validated["execution"]["k8s"]
    assert executor["job_namespace"] == "hir"
    assert executor["per_step_k8s_config"]["hir_encoder"]["container_config"]["resources"]["limits"] == {"nvidia.com/gpu": 1}
    steps = {node.name for node in job.graph.nodes}
    assert set(run_config["execution"]["config"]["per_step_k8s_config"]) <= steps, "per-step config names real steps"


def test_the_default_executor_refuses_k8s_run_config(tmp_path):
    job = build_definitions(Settings.from_env(data_home=tmp_path)).resolve_job_def("hir_job")
    with pytest.raises(dg.DagsterInvalidConfigError, match="in_process"):
        dg.validate_run_config(job, _yaml("k8s-executor.yaml"))
    with pytest.raises(SettingsError, match="HIR_EXECUTOR"):
        hir_executor(Settings.from_env(data_home=tmp_path, executor="celery"))


def test_helm_values_run_this_code_location():
    values = _yaml("helm-values.yaml")
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    workspace = yaml.safe_load((ROOT / "workspace.yaml").read_text())["load_from"][0]["python_module"]
    args = deployment["codeServerArgs"]
    assert args[args.index("--module-name") + 1] == workspace["module_name"]
    assert {"name": "hir-settings"} in deployment["envConfigMaps"]
    data_home = Path(_yaml("hir-settings.yaml")["data"]["HIR_DATA_HOME"])
    assert any(data_home.is_relative_to(m["mountPath"]) for m in deployment["volumeMounts"]), "data home on the shared volume"
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    assert "hir-settings" in _yaml("dagster-k8s.yaml")["run_launcher"]["config"]["env_config_maps"]
