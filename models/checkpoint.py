"""Checkpoints of a training run (DESIGN §7): safetensors weights, JSON configs and training state.
Nothing here unpickles.

A checkpoint folder (written atomically file by file, ``state.json`` last):
``model.safetensors`` (``student.*``, ``teacher.*``), ``optimizer.safetensors`` (AdamW moments),
``config.json`` (train, encoder and sampler configs) and ``state.json`` (step, metrics history,
RNG states, parameter count). Each safetensors file records the step it was written at, so a
folder torn by a crash between two files is refused rather than resumed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.nn as nn
from hir.models.encoder import EncoderConfig
from hir.models.model import HIRModel, TrainConfig
from hir.models.sampler import SamplerConfig
from safetensors.torch import load_file, save_file

CHECKPOINT_FILES = ("model.safetensors", "optimizer.safetensors", "config.json", "state.json")
# Fields that may differ between a checkpoint and a resumed run: they change no number.
RUNTIME_FIELDS = frozenset({"checkpoint_every", "log_every", "backend"})


class CheckpointMismatch(ValueError):
    """A checkpoint was written with a different configuration than the one requested."""


class CheckpointError(ValueError):
    """A checkpoint file is not what it claims to be (e.g. a pickle in place of safetensors)."""


def config_dict(config: TrainConfig, encoder: EncoderConfig, sampler: SamplerConfig) -> dict[str, Any]:
    """The JSON form of a run's configuration (``config.json``)."""
    return {"train": asdict(config), "encoder": asdict(encoder), "sampler": asdict(sampler)}


def check_config(saved: dict[str, Any], requested: dict[str, Any], where: Path, ignore: frozenset = RUNTIME_FIELDS) -> None:
    """Raise :class:`CheckpointMismatch` naming every field where ``saved`` and ``requested`` differ."""
    diffs = []
    for part in ("train", "encoder", "sampler"):
        old, new = saved.get(part, {}), requested[part]
        for key in sorted(set(old) | set(new)):
            if key in ignore or old.get(key) == new.get(key):
                continue
            diffs.append(f"{part}.{key}: checkpoint {old.get(key)!r} != requested {new.get(key)!r}")
    if diffs:
        raise CheckpointMismatch(f"checkpoint {where} was written with a different config: " + "; ".join(diffs))


def _atomic_save(path: Path, write: Callable[[Path], None]) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _write_json(path: Path, obj: Any) -> None:
    _atomic_save(path, lambda tmp: tmp.write_text(json.dumps(obj, indent=2, sort_keys=True)))


def rng_state() -> dict[str, Any]:
    """Python, NumPy and torch RNG states as JSON-friendly lists."""
    np_state = np.random.get_state()
    return {
        "python": [list(random.getstate()[1]), random.getstate()[0], random.getstate()[2]],
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "torch": torch.get_rng_state().tolist(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` recorded."""
    internal, version, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """AdamW state as flat tensors ``state.<param index>.<name>``."""
    out = {}
    for index, state in optimizer.state_dict()["state"].items():
        for name, value in state.items():
            out[f"state.{index}.{name}"] = torch.as_tensor(value).detach().cpu().contiguous()
    return out


def load_optimizer_tensors(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], device: torch.device) -> None:
    """Inverse of :func:`optimizer_tensors` for an optimiser over the same parameters."""
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        _, index, name = key.split(".", 2)
        state.setdefault(int(index), {})[name] = value if name == "step" else value.to(device)
    current = optimizer.state_dict()
    optimizer.load_state_dict({"state": state, "param_groups": current["param_groups"]})


def save(folder: Path, student: nn.Module, teacher: nn.Module, optimizer: torch.optim.Optimizer,
         config: dict[str, Any], state: dict[str, Any]) -> None:
    """Write the checkpoint of ``state["step"]`` into ``folder``, ``state.json`` (``state`` plus the
    RNG states) last; ``config`` is :func:`config_dict`'s."""
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"step": str(state["step"])}
    weights = {f"student.{k}": v for k, v in student.state_dict().items()}
    weights.update({f"teacher.{k}": v for k, v in teacher.state_dict().items()})
    weights = {k: v.detach().cpu().contiguous() for k, v in weights.items()}
    _atomic_save(folder / "model.safetensors", lambda p: save_file(weights, str(p), metadata=meta))
    opt = optimizer_tensors(optimizer)
    _atomic_save(folder / "optimizer.safetensors", lambda p: save_file(opt, str(p), metadata=meta))
    _write_json(folder / "config.json", config)
    _write_json(folder / "state.json", {**state, "rng": rng_state()})


def resume(folder: Path, student: nn.Module, teacher: nn.Module, optimizer: torch.optim.Optimizer,
           config: dict[str, Any], device: torch.device) -> dict[str, Any] | None:
    """Load the checkpoint in ``folder`` into the models and the optimiser and restore the RNG
    states; return its ``state.json``, or ``None`` where ``folder`` holds no checkpoint.

    Raises :class:`CheckpointMismatch` where it was written with another ``config``, or is torn.
    """
    if not (folder / "state.json").exists():
        return None
    saved = json.loads((folder / "config.json").read_text())
    check_config(saved, config, folder)
    state = json.loads((folder / "state.json").read_text())
    weights = _load_checked(folder / "model.safetensors", state["step"])
    student.load_state_dict(_prefixed(weights, "student."))
    teacher.load_state_dict(_prefixed(weights, "teacher."))
    load_optimizer_tensors(optimizer, _load_checked(folder / "optimizer.safetensors", state["step"]), device)
    set_rng_state(state["rng"])
    return state


def warm_start(folder: Path, student: HIRModel, teacher: HIRModel, config: dict[str, Any]) -> None:
    """Load another run's weights into ``student`` and ``teacher``: encoder, heads and prototypes
    (hashed id tables carry over, so new entities need no resizing), and the item residuals of the
    items both runs train on (:func:`_carry_residuals`).

    Raises :class:`CheckpointMismatch` where a shape differs: the encoder config, or the
    prototype counts and projection width.
    """
    saved = json.loads((folder / "config.json").read_text())
    shape_fields = frozenset(set(saved.get("train", {})) - {"coarse", "fine", "proj_dim"})
    check_config({"train": saved["train"], "encoder": saved["encoder"], "sampler": config["sampler"]}, config, folder, ignore=shape_fields)
    weights = read_weights(folder / "model.safetensors")
    for prefix, model in (("student.", student), ("teacher.", teacher)):
        model.load_state_dict(_carry_residuals(_prefixed(weights, prefix), model))


def _carry_residuals(state: dict[str, torch.Tensor], model: HIRModel) -> dict[str, torch.Tensor]:
    """``state`` with its per-item tables (residuals, context) moved to ``model``'s rows by entity id:
    a later snapshot trains on other items (new ones start at zero, ones no longer trained on are
    dropped), and a run with a table switched on or off starts from one without it or drops it."""
    for name in ("residual", "context"):
        ids, rows = state.pop(f"{name}.entity_ids", None), state.pop(f"{name}.weight", None)
        table = getattr(model, name)
        if table is None:
            continue
        target = table.entity_ids
        weight = torch.zeros_like(table.weight)
        if ids is not None and ids.numel():
            at = torch.searchsorted(ids, target).clamp_max(ids.numel() - 1)
            hit = ids[at] == target
            weight[hit] = rows[at[hit]].to(weight.dtype)
        state = {**state, f"{name}.entity_ids": target.clone(), f"{name}.weight": weight}
    return state


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of the safetensors file ``path``; anything else (a pickle, a torn file) raises
    :class:`CheckpointError` naming the file. Nothing here unpickles."""
    from safetensors import SafetensorError

    try:
        return load_file(str(path))
    except SafetensorError as exc:
        raise CheckpointError(f"{path}: not a safetensors checkpoint ({exc}); hir never loads pickles") from None


def _prefixed(weights: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)}


def _load_checked(path: Path, step: int) -> dict[str, torch.Tensor]:
    """Load a safetensors file and check it belongs to the checkpoint of ``step``."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as fh:
            written = int((fh.metadata() or {}).get("step", -1))
    except SafetensorError as exc:
        raise CheckpointError(f"{path}: not a safetensors checkpoint ({exc}); hir never loads pickles") from None
    if written != int(step):
        raise CheckpointMismatch(f"{path} holds step {written} but state.json says step {step}; the checkpoint is torn")
    return read_weights(path)


def read_configs(folder: str | Path) -> tuple[TrainConfig, EncoderConfig, SamplerConfig]:
    """The three configs of a checkpoint folder."""
    saved = json.loads((Path(folder) / "config.json").read_text())
    return _from_dict(TrainConfig, saved["train"]), _from_dict(EncoderConfig, saved["encoder"]), _from_dict(SamplerConfig, saved["sampler"])


def _from_dict(cls, values: dict[str, Any]):
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in values.items() if k in names})


def load_model(folder: str | Path, num_edge_types: int, device: str | torch.device = "cpu", which: str = "student") -> HIRModel:
    """The ``student`` (default) or ``teacher`` model of a checkpoint folder, in eval mode.

    Inference uses the student: its engagement head and prototype predictions were fitted on
    exactly its representations, and in runs of a few hundred steps the EMA teacher lags it.
    """
    config, encoder_config, _ = read_configs(folder)
    model = HIRModel(encoder_config, config, num_edge_types)
    model.load_state_dict(_prefixed(read_weights(Path(folder) / "model.safetensors"), f"{which}."))
    return model.to(device).eval()

