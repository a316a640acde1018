"""A tiny open_clip model saved as a real checkpoint, for tests of the image embedder and the assets."""

from __future__ import annotations

import json
from pathlib import Path

TINY_CLIP = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 8},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}


def write_tiny_clip(folder: Path, name: str = "hir-tiny-clip", seed: int = 0, config: dict | None = None):
    """Build a tiny open_clip model with seed ``seed``; save its config JSON (registered under
    ``name``) and safetensors weights in ``folder``; return ``(config path, weights path, model)``."""
    import open_clip
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    config_path = folder / f"{name}.json"
    config_path.write_text(json.dumps(config or TINY_CLIP))
    open_clip.add_model_config(config_path)
    torch.manual_seed(seed)
    model = open_clip.create_model(name).eval()
    weights = folder / f"{name}-seed{seed}.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(weights))
    return config_path, weights, model
