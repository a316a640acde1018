"""Security: no pickle loads, SQL values as parameters, path settings confined, UI on localhost."""

import json
import os
import pickle

import pytest
from hir.cli import main as cli
from hir.errors import SettingsError
from hir.settings import Settings


class _Payload:
    """Unpickling this would create the file ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_planted_pickle_checkpoint_is_refused_and_not_executed(tmp_path):
    from hir.models.checkpoint import CheckpointError, _load_checked, load_model

    marker = tmp_path / "pwned"
    folder = tmp_path / "hir_encoder"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(pickle.dumps({"student.w": _Payload(marker)}))
    (folder / "config.json").write_text(json.dumps({"train": {}, "encoder": {}, "sampler": {}}))
    with pytest.raises(CheckpointError, match="model.safetensors: not a safetensors checkpoint"):
        load_model(folder, num_edge_types=1)
    with pytest.raises(CheckpointError, match="never loads pickles"):
        _load_checked(folder / "model.safetensors", step=1)
    assert not marker.exists()


def test_no_module_calls_pickle_or_unsafe_torch_load():
    """A guard over the sources; the behaviour is the test above."""
    root = cli.__file__.rsplit("/platform/", 1)[0]
    offenders = []
    for folder in ("platform", "assets", "models"):
        for base, _, files in os.walk(os.path.join(root, folder)):
            for name in files:
                if name.endswith(".py"):
                    text = open(os.path.join(base, name), encoding="utf-8").read()
                    if "pickle.load" in text or ("torch.load(" in text and "weights_only=True" not in text):
                        offenders.append(name)
    assert offenders == []


@pytest.mark.parametrize("value", ["../outside", "/etc/passwd", "{home}/../elsewhere", "{home}/link/escape"])
def test_path_setting_outside_the_data_home_is_refused(tmp_path, value):
    home = tmp_path / "home"
    (home).mkdir()
    (home / "link").symlink_to(tmp_path)  # a symlink inside the home pointing out of it
    settings = Settings.from_mapping({"HIR_DATA_HOME": str(home)})
    path = value.format(home=home) if "{home}" in value else (home / value if value.startswith("..") else value)
    with pytest.raises(SettingsError, match="HIR_ALLOW_OUTSIDE_PATHS"):
        settings.resolve_path(path, "HIR_X")
    allowed = Settings.from_mapping({"HIR_DATA_HOME": str(home), "HIR_ALLOW_OUTSIDE_PATHS": "1"})
    assert not allowed.resolve_path(path, "HIR_X").is_relative_to(home.resolve())


def test_bench_path_outside_the_data_home_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HIR_DATA_HOME", str(tmp_path / "home"))
    code = cli.main(["bench", "quantizer", "--embeddings", str(tmp_path / "elsewhere.parquet")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "outside the data home" in err


def test_ui_binds_to_localhost_by_default(tmp_path, monkeypatch, capsys):
    import subprocess

    calls = []
    monkeypatch.delenv("HIR_UI_HOST", raising=False)
    monkeypatch.setattr(subprocess, "call", lambda cmd, *a, **k: calls.append(cmd) or 0)
    assert cli.main(["ui", "--data-home", str(tmp_path / "home")]) == 0
    cmd = calls[0]
    assert cmd[1:4] == ["-m", "dagster", "dev"] and cmd[cmd.index("-h") + 1] == "127.0.0.1"
    assert "http://127.0.0.1:" in capsys.readouterr().out
    assert Settings.from_mapping({}).ui_host == "127.0.0.1"


@pytest.mark.parametrize("partition", ["../../etc", "2026-01-01/../../x", "1999-01-01"])
def test_partition_that_is_not_a_day_is_refused_before_any_work(data_home, capsys, partition):
    code = cli.main(["run", "--partition", partition, "--data-home", str(data_home)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--partition" in err[0]
    assert not (data_home / "warehouse.duckdb").exists()
