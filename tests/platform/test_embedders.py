"""Text and image embedders: offline default text model, a tiny open_clip checkpoint through the product path."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import shared_data
from tiny_open_clip import TINY_CLIP, write_tiny_clip


def fashion_images(n: int) -> list[str]:
    folder = shared_data("fashion_images") / "images"
    return [str(p) for p in sorted(folder.glob("*.jpg"))[:n]]


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory):
    return write_tiny_clip(tmp_path_factory.mktemp("clip"))


def cosine(a, b) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_default_text_model_loads_offline_and_ranks_paraphrases(monkeypatch):
    from hir.world_knowledge.embedders import DEFAULT_TEXT_MODEL_ID, TextEmbedder

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    embedder = TextEmbedder(batch_size=8)
    v = embedder.embed([
        "A man is playing the guitar on stage.",
        "Someone performs a song on a guitar in front of an audience.",
        "The central bank raised interest rates by half a point.",
    ])
    assert v.dtype == np.float32 and v.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert cosine(v[0], v[1]) > cosine(v[0], v[2]) + 0.2
    assert embedder.model_id == DEFAULT_TEXT_MODEL_ID
    assert TextEmbedder(batch_size=32).load() is embedder.load(), "a second resource must reuse the loaded model"
    assert embedder.embed([]).shape == (0, 384)


def test_unknown_text_model_is_a_clear_error(monkeypatch, tmp_path):
    from hir.world_knowledge.embedders import EmbedderError, TextEmbedder

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(EmbedderError, match="HIR_TEXT_MODEL='no-such-org/no-such-model'"):
        TextEmbedder(model="no-such-org/no-such-model").load()


def test_tiny_clip_checkpoint_loads_through_the_product_path(tiny_clip):
    import torch
    from hir.world_knowledge.embedders import ImageEmbedder
    from PIL import Image

    config, weights, original = tiny_clip
    embedder = ImageEmbedder(model=str(config), checkpoint=str(weights), batch_size=4)
    assert embedder.unavailable_reason() == ""
    assert embedder.model_id.startswith("open_clip:hir-tiny-clip:sha256-")
    paths = fashion_images(10)
    result = embedder.embed_images(paths)
    assert result.ok == list(range(10)) and result.failures == []
    assert result.vectors.shape == (10, 32) and result.vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(result.vectors, axis=1), 1.0, atol=1e-5)
    assert np.linalg.matrix_rank(result.vectors) > 1, "different images must give different vectors"
    # The loaded weights are the saved ones: the original model gives the same vectors.
    clip = embedder.load()
    with torch.inference_mode():
        batch = torch.stack([clip.preprocess(Image.open(p).convert("RGB")) for p in paths])
        expected = original.encode_image(batch, normalize=True).numpy()
        np.testing.assert_allclose(result.vectors, expected, atol=1e-5)
        text = embedder.embed_texts(["navy blue shirt", "silver watch"])
        tokens = clip.tokenizer(["navy blue shirt", "silver watch"])
        np.testing.assert_allclose(text, original.encode_text(tokens, normalize=True).numpy(), atol=1e-5)


def test_corrupt_and_missing_images_are_reported_and_skipped(tiny_clip, tmp_path):
    from hir.world_knowledge.embedders import ImageEmbedder

    config, weights, _ = tiny_clip
    corrupt = tmp_path / "corrupt.jpg"
    corrupt.write_bytes(b"\xff\xd8\xff this is not a jpeg" * 10)
    good = fashion_images(2)
    uris = [good[0], str(corrupt), str(tmp_path / "missing.jpg"), "https://example.com/a.jpg", good[1]]
    result = ImageEmbedder(model=str(config), checkpoint=str(weights)).embed_images(uris)
    assert result.ok == [0, 4]
    assert result.vectors.shape == (2, 32)
    reasons = {index: reason for index, _, reason in result.failures}
    assert set(reasons) == {1, 2, 3}
    assert "unreadable image" in reasons[1] and "corrupt.jpg" in reasons[1]
    assert "file not found" in reasons[2]
    assert "not a local file" in reasons[3]


def test_no_weights_gives_a_reason_and_never_random_weights(tiny_clip, tmp_path, monkeypatch):
    import huggingface_hub.constants
    from hir.world_knowledge.embedders import EmbedderError, ImageEmbedder

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-hf-cache"))
    assert ImageEmbedder().unavailable_reason().startswith("no weights: no image checkpoint configured")
    reason = ImageEmbedder(model="ViT-B-32", pretrained="laion2b_s34b_b79k").unavailable_reason()
    assert reason.startswith("no weights:") and "not in the local cache" in reason
    assert "not a pretrained tag" in ImageEmbedder(model="ViT-B-32", pretrained="nonsense").unavailable_reason()
    assert "is not a file" in ImageEmbedder(model="ViT-B-32", checkpoint=str(tmp_path / "none.pt")).unavailable_reason()
    # Weights of another shape must not load partially.
    config, weights, _ = tiny_clip
    other = write_tiny_clip(tmp_path / "other", name="hir-tiny-clip-16", config={**TINY_CLIP, "embed_dim": 16})[0]
    reason = ImageEmbedder(model=str(other), checkpoint=str(weights)).unavailable_reason()
    assert reason.startswith("no weights:") and "does not load into hir-tiny-clip-16" in reason
    with pytest.raises(EmbedderError):
        ImageEmbedder(model=str(other), checkpoint=str(weights)).embed_images(fashion_images(1))


def test_pretrained_tag_resolves_to_the_local_hugging_face_cache_only(tmp_path, monkeypatch):
    import huggingface_hub.constants
    from hir.world_knowledge.embedders import resolve_clip_weights

    cache = tmp_path / "hf-cache"
    repo = cache / "models--laion--CLIP-ViT-B-32-laion2B-s34B-b79K"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    weights = repo / "snapshots" / "abc123" / "open_clip_pytorch_model.safetensors"
    weights.write_bytes(b"placeholder")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    found = resolve_clip_weights("ViT-B-32", "", "laion2b_s34b_b79k")
    assert found.checkpoint == str(weights)
    assert found.model_id == "open_clip:ViT-B-32:laion2b_s34b_b79k"
    assert dict(found.preprocess)["image_interpolation"] == "bicubic"
