"""torchrun hands its checkpoint to the asset: both build their configs from the same settings."""

import json
import os
import subprocess
import sys

import dagster as dg
import pytest
import torch
from conftest import REPO
from hir.cli.bench.feast import free_port
from hir.models.planted import planted_events, write_snapshot
from hir.resources import build_resources
from hir.settings import Settings
from safetensors.torch import load_file

DAY = "2026-01-10"
TINY = {
    "HIR_TRAIN_STEPS": "3", "HIR_TRAIN_BATCH": "8", "HIR_TRAIN_DIM": "16", "HIR_TRAIN_LAYERS": "1",
    "HIR_TRAIN_HEADS": "2", "HIR_TRAIN_COARSE": "4", "HIR_TRAIN_FINE": "8", "HIR_TRAIN_BROAD_TOKENS": "16",
    "HIR_TRAIN_NARROW_TOKENS": "6", "HIR_TRAIN_LOG_EVERY": "1",
}


@pytest.mark.slow
def test_torchrun_sh_trains_two_ranks_and_the_asset_publishes_that_checkpoint(tmp_path):
    from hir.assets.training import hir_encoder

    home = tmp_path / "home"
    events = planted_events(users=80, items=60, events_per_user=6)
    write_snapshot(events, float(events.ts.max()) + 1, home / "artifacts" / "graph_snapshot" / DAY)
    settings_env = {"HIR_DATA_HOME": str(home), **TINY}
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIR_")}
    env.update(settings_env, NPROC="2", MASTER_PORT=str(free_port()), OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="",
               PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{env.get('PATH', '')}")  # the environment is active
    done = subprocess.run(["bash", str(REPO / "platform" / "deploy" / "torchrun.sh"), DAY, "--rank-weights"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert '"world_size": 2' in done.stdout
    work = home / "artifacts" / "hir_encoder" / f".work-{DAY}"
    r0, r1 = load_file(str(work / "rank0.safetensors")), load_file(str(work / "rank1.safetensors"))
    assert r0.keys() == r1.keys()
    for key in r0:
        assert torch.allclose(r0[key], r1[key], atol=1e-6), key
    trained = load_file(str(work / "model.safetensors"))
    state = json.loads((work / "state.json").read_text())
    assert state["step"] == {1: 3, 2: 9}[len(state["cycle_recall"])]  # two ranks through the default's cycles (3, then 6 steps)

    settings = Settings.from_mapping(settings_env)
    result = dg.materialize([hir_encoder], partition_key=DAY, resources=build_resources(settings))
    assert result.success
    meta = result.asset_materializations_for_node("hir_encoder")[0].metadata
    assert meta["steps"].value == state["step"]
    published = home / "artifacts" / "hir_encoder" / DAY / "model.safetensors"
    published = load_file(str(published))
    assert published.keys() == trained.keys()
    for key in trained:  # resumed at its last step: nothing trained again (a re-save may round differently)
        assert torch.allclose(published[key], trained[key], atol=1e-5), key
    assert not work.exists()
