"""Hierarchical additive quantizer: error falls with levels and training, hierarchy, checkpoints."""

from __future__ import annotations

import pytest
import torch
from hir.models.quantizer import (
    HierarchicalQuantizer,
    QuantizerConfig,
    kmeans,
    prefix_paths,
    split_token,
    token_ids,
)


def planted(n: int = 1200, dim: int = 16, coarse: int = 4, fine: int = 3, seed: int = 0):
    """Vectors = coarse centre + fine offset + noise; returns (x, coarse label, fine label)."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(coarse, dim, generator=g) * 3.0
    offsets = torch.randn(coarse, fine, dim, generator=g)
    c = torch.randint(coarse, (n,), generator=g)
    f = torch.randint(fine, (n,), generator=g)
    return centres[c] + offsets[c, f] + 0.2 * torch.randn(n, dim, generator=g), c, f


@pytest.fixture(scope="module")
def trained():
    x, c, f = planted()
    q = HierarchicalQuantizer(QuantizerConfig(dim=16, codes=[4, 12, 32], iterations=4))
    codes, history = q.fit(x)
    return q, x, c, f, codes, history


def test_error_falls_as_levels_are_added(trained):
    q, x, _, _, codes, _ = trained
    mse = q.mse_per_level(x, codes)
    assert len(mse) == 3
    assert mse[0] > mse[1] > mse[2]
    assert mse[2] == pytest.approx(q.mse(x, codes), rel=1e-5)
    assert mse[2] < 0.1 * x.var(0).sum()


def test_training_never_increases_error(trained):
    *_, history = trained
    assert all(b <= a * (1 + 1e-5) for a, b in zip(history, history[1:]))
    assert history[-1] < history[0]


def test_level_one_recovers_planted_coarse_clusters(trained):
    _, _, c, f, codes, _ = trained
    joint = torch.bincount(codes[:, 0] * 4 + c, minlength=16).reshape(4, 4)
    purity = joint.max(1).values.sum() / c.numel()
    assert purity > 0.95
    fine = c * 3 + f
    joint2 = torch.bincount((codes[:, 0] * 12 + codes[:, 1]) * 12 + fine, minlength=48 * 12).reshape(48, 12)
    assert joint2.max(1).values.sum() / c.numel() > 0.9


def test_encode_of_new_vectors_matches_trained_quality(trained):
    q, x, *_ = trained
    fresh, _, _ = planted(n=300, seed=0)
    assert q.mse(fresh, q.encode(fresh)) <= 1.2 * q.mse(x, trained[4])


def test_usage_reports_collapse_share(trained):
    q, _, _, _, codes, _ = trained
    usage = q.usage(codes)
    assert [u["codewords"] for u in usage] == [4, 12, 32]
    assert usage[0]["used"] == 1.0
    assert 0.2 < usage[0]["top_share"] < 0.4  # four balanced planted clusters
    collapsed = q.usage(torch.zeros_like(codes))
    assert collapsed[0]["top_share"] == 1.0 and collapsed[0]["perplexity"] == pytest.approx(1.0)


def test_save_load_round_trip(trained, tmp_path):
    q, x, *_ = trained
    q.save(tmp_path)
    loaded = HierarchicalQuantizer.load(tmp_path)
    assert loaded.config == q.config
    codes = q.encode(x[:50])
    assert torch.equal(loaded.encode(x[:50]), codes)
    assert torch.allclose(loaded.decode(codes), q.decode(codes))


def test_kmeans_handles_duplicate_points():
    x = torch.zeros(10, 3)
    x[5:] = 1.0
    centroids = kmeans(x, 4, 5, torch.Generator().manual_seed(0))
    assert centroids.shape == (4, 3)
    assert torch.isfinite(centroids).all()


def test_token_ids_are_nested_prefixes_and_split():
    codes = torch.tensor([[3, 7, 0], [3, 7, 5], [3, 2, 0], [1, 7, 0]])
    tokens = token_ids(codes, [4, 8, 16])
    assert tokens[0].tolist() == [1_000_000_003, 2_000_000_000 + 3 * 8 + 7, 3_000_000_000 + (3 * 8 + 7) * 16]
    assert split_token(int(tokens[0, 1])) == (2, 31)
    # code 7 at level 2 is one token under code 3 at level 1 and another under code 1
    assert tokens[0, 1] == tokens[1, 1] and tokens[0, 1] != tokens[3, 1]
    assert tokens[0, 2] != tokens[2, 2] and tokens[0, 2] != tokens[3, 2]


def test_a_fine_token_implies_its_coarse_token():
    """Equal tokens at level l mean equal tokens at every level above, for any codes."""
    g = torch.Generator().manual_seed(0)
    sizes = [4, 6, 8]
    codes = torch.stack([torch.randint(k, (2000,), generator=g) for k in sizes], 1)
    tokens = token_ids(codes, sizes)
    for level in (1, 2):
        _, inverse = tokens[:, level].unique(return_inverse=True)
        for group in range(int(inverse.max()) + 1):
            assert tokens[inverse == group, : level].unique(dim=0).shape[0] == 1
    assert prefix_paths(codes, sizes)[:, 2].max() < 4 * 6 * 8
    with pytest.raises(ValueError):
        token_ids(codes, [1000, 1000, 1000])
