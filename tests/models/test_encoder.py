"""HIR encoder: shapes, flex ≡ dense, permutation invariance, unseen ids, tree distances."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hir.models.attention import BiasedSelfAttention, TokenStructure, tree_distance
from hir.models.encoder import EncoderConfig, HIREncoder, gather_wk
from hir.models.graph import TemporalGraph, build_csr
from hir.models.hashing import hash64
from hir.models.sampler import SamplerConfig, View, ViewSampler

CONFIG = EncoderConfig(dim=32, layers=2, heads=4, dropout=0.0, num_node_types=3, num_edge_types=2, hash_buckets=512, wk_dim=8)


@pytest.fixture(scope="module")
def graph() -> TemporalGraph:
    g = torch.Generator().manual_seed(0)
    n, e = 200, 1500
    src = torch.multinomial(torch.arange(1, n + 1, dtype=torch.float64) ** -1.1, e, replacement=True, generator=g)
    dst = torch.randint(0, n, (e,), generator=g)
    csr = build_csr(n, src, dst, torch.randint(0, 2, (e,), generator=g), torch.rand(e, generator=g) + 0.1,
                    torch.rand(e, generator=g, dtype=torch.float64) * 1e6, torch.ones(e))
    return TemporalGraph(
        cutoff=1e6, entity_id=torch.randint(0, 1 << 40, (n,), generator=g), node_type=torch.randint(0, 3, (n,), generator=g),
        node_features=torch.rand(n, 3, generator=g), node_types=["user", "ad", "item"], edge_types=["click", "buy"], csr=csr,
    )


@pytest.fixture(scope="module")
def view(graph) -> View:
    """Six broad views of 24 tokens; the last anchors have few neighbours, so there is padding."""
    degree = graph.csr.degree()
    anchors = torch.cat([torch.argsort(degree, descending=True)[:3], torch.argsort(degree)[:3]])
    sampler = ViewSampler(graph, SamplerConfig(broad_tokens=24, broad_walkers=8, broad_steps=8))
    out = sampler.broad(anchors, torch.Generator().manual_seed(1))
    assert bool(out.pad.any()) and bool((~out.pad[:, 1:]).any())
    return out


@pytest.fixture(scope="module")
def wk_table(graph) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    return torch.randn(graph.num_nodes, CONFIG.wk_dim, generator=g), torch.rand(graph.num_nodes, generator=g) < 0.5


@pytest.fixture(scope="module")
def encoder() -> HIREncoder:
    """An encoder with random (non-zero) attention biases, in eval mode."""
    torch.manual_seed(0)
    model = HIREncoder(CONFIG)
    for block in model.blocks:
        torch.nn.init.normal_(block.attn.type_bias)
        torch.nn.init.normal_(block.attn.dist_bias)
    return model.eval()


@pytest.fixture(scope="module")
def flex_tokens(encoder, view, wk_table) -> torch.Tensor:
    """Token states from the compiled flex backend (compiled once for this module)."""
    wk, has = gather_wk(view, *wk_table)
    with torch.no_grad():
        return encoder.tokens(view, wk, backend="flex", has_wk=has)


def _permute(view: View, perm: torch.Tensor) -> View:
    """Reorder tokens by ``perm`` (new position i holds old token perm[i]); re-index parents and ancestors."""
    inverse = torch.argsort(perm)

    def reindex(t: torch.Tensor) -> torch.Tensor:
        return torch.where(t >= 0, inverse[t.clamp_min(0)], -1)

    moved = {f.name: getattr(view, f.name)[:, perm] for f in dataclasses.fields(view)}
    moved["parent"] = reindex(moved["parent"])
    moved["ancestors"] = reindex(moved["ancestors"])
    return View(**moved)


def test_shapes_and_gather_wk(encoder, view, wk_table):
    wk, has = gather_wk(view, *wk_table)
    assert wk.shape == (6, 24, CONFIG.wk_dim) and has.shape == (6, 24)
    assert not bool(has[view.pad].any()) and bool((wk[~has] == 0).all())
    with torch.no_grad():
        assert encoder(view, wk).shape == (6, CONFIG.dim)
        assert encoder.tokens(view, wk).shape == (6, 24, CONFIG.dim)
        assert encoder(view).shape == (6, CONFIG.dim)  # no world knowledge given


def test_backends_agree_with_padding(encoder, view, wk_table, flex_tokens):
    wk, has = gather_wk(view, *wk_table)
    with torch.no_grad():
        dense = encoder.tokens(view, wk, backend="dense", has_wk=has)
    real = ~view.pad
    assert torch.allclose(dense[real], flex_tokens[real], atol=1e-5, rtol=0)
    assert torch.isfinite(flex_tokens).all()


def test_dense_backward_reaches_every_parameter(view, wk_table):
    model = HIREncoder(dataclasses.replace(CONFIG, dropout=0.1)).train()
    wk, has = gather_wk(view, *wk_table)
    model(view, wk, has_wk=has).square().sum().backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), name
    for block in model.blocks:
        assert block.attn.type_bias.grad.abs().sum() > 0 and block.attn.dist_bias.grad.abs().sum() > 0


@pytest.mark.parametrize("backend", ["dense", "flex"])
def test_permuting_non_anchor_tokens_keeps_the_anchor(encoder, view, wk_table, flex_tokens, backend):
    perm = torch.cat([torch.zeros(1, dtype=torch.long), 1 + torch.randperm(view.num_tokens - 1, generator=torch.Generator().manual_seed(4))])
    moved = _permute(view, perm)
    assert not torch.equal(moved.node, view.node)
    with torch.no_grad():
        base = flex_tokens[:, 0] if backend == "flex" else encoder(view, gather_wk(view, *wk_table)[0])
        out = encoder(moved, gather_wk(moved, *wk_table)[0], backend=backend)
    assert torch.allclose(out, base, atol=1e-5, rtol=0)


def test_padding_content_is_ignored(encoder, view, wk_table):
    noisy = dataclasses.replace(view, node_type=torch.where(view.pad, 2, view.node_type),
                                entity_id=torch.where(view.pad, 12345, view.entity_id), hop=torch.where(view.pad, 3, view.hop))
    wk = gather_wk(view, *wk_table)[0]
    with torch.no_grad():
        assert torch.allclose(encoder(noisy, wk), encoder(view, wk), atol=1e-6)


def _anchored(view: View, wk: torch.Tensor, ids: torch.Tensor, anchor_wk: torch.Tensor | None) -> tuple[View, torch.Tensor, torch.Tensor]:
    """Copies of view 0, one per id of ``ids``, whose anchor has that id and world knowledge
    ``anchor_wk[i]`` (None: none); the neighbourhood is the same in every copy."""
    rows = torch.zeros(ids.numel(), dtype=torch.long)
    copy = View(**{f.name: getattr(view, f.name)[rows].clone() for f in dataclasses.fields(view)})
    copy.entity_id[:, 0] = ids
    wk_copy, has = wk[rows].clone(), ~copy.pad
    wk_copy[:, 0] = 0.0 if anchor_wk is None else anchor_wk
    has[:, 0] = anchor_wk is not None
    return copy, wk_copy, has


def _nearest(encoder: HIREncoder, view: View, wk: torch.Tensor, known, probes) -> list[int]:
    """For each probe anchor ``(ids, wk)``, the index of the nearest known anchor's embedding."""
    with torch.no_grad():
        known_emb, probe_emb = (encoder(v, w, has_wk=h) for v, w, h in (_anchored(view, wk, *known), _anchored(view, wk, *probes)))
    assert torch.isfinite(probe_emb).all()
    return torch.cdist(probe_emb, known_emb).argmin(dim=1).tolist()


def _near_collisions(seeds: torch.Tensor, buckets: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` pairs of ids ≥ 2⁵⁰ (never in the graph): the two ids of a pair hash to the same
    buckets under every seed but the last; no bucket is shared between pairs."""
    ids = torch.randint(1 << 50, 1 << 51, (60_000,), generator=torch.Generator().manual_seed(5))
    rows = hash64(ids.unsqueeze(-1), seeds) % buckets
    key = rows[:, :-1] @ (buckets ** torch.arange(seeds.numel() - 1))
    order = torch.argsort(key, stable=True)
    first, second, used = [], [], set()
    for a, b in zip(order[:-1].tolist(), order[1:].tolist()):
        touched = set(rows[a].tolist()) | set(rows[b].tolist())
        if key[a] == key[b] and rows[a, -1] != rows[b, -1] and not touched & used:
            first.append(ids[a]), second.append(ids[b])
            used |= touched
        if len(first) == count:
            return torch.stack(first), torch.stack(second)
    raise AssertionError("too few near-collisions among the candidate ids")


def test_unseen_entity_lands_next_to_the_entity_sharing_its_world_knowledge(encoder, view, wk_table):
    """An unseen id with entity i's world-knowledge vector is nearest to entity i among six known
    entities that differ only in id and world knowledge (same neighbourhood)."""
    wk = gather_wk(view, *wk_table)[0]
    vectors = torch.randn(6, CONFIG.wk_dim, generator=torch.Generator().manual_seed(6))
    known = torch.arange(6) + 1000
    unseen = torch.arange(6) + (1 << 50)
    assert not set(unseen.tolist()) & set(view.entity_id.flatten().tolist())
    assert _nearest(encoder, view, wk, (known, vectors), (unseen, vectors)) == list(range(6))


def test_unseen_entity_lands_next_to_the_entity_sharing_its_hashed_rows(encoder, view, wk_table):
    """An unseen id that shares all but one hashed-id row with entity i (and none with the others)
    is nearest to entity i; none of them has world knowledge, so only the hashed id tells them apart."""
    wk = gather_wk(view, *wk_table)[0]
    known, unseen = _near_collisions(encoder.node.seeds, CONFIG.hash_buckets, 6)
    assert not torch.equal(encoder.node.hashed_id(known), encoder.node.hashed_id(unseen))
    assert _nearest(encoder, view, wk, (known, None), (unseen, None)) == list(range(6))


def test_tree_distance_and_dense_bias():
    # Tree 0 → {1, 2}, 1 → 3; position 4 is padding.
    anc = torch.tensor([[[0, -1, -1], [0, 1, -1], [0, 2, -1], [0, 1, 3], [-1, -1, -1]]])
    structure = TokenStructure(torch.tensor([[0, 1, 1, 0, 0]]), torch.tensor([[0, 1, 1, 2, 0]]), anc, torch.tensor([[False] * 4 + [True]]))
    expected = [[0, 1, 1, 2], [1, 0, 2, 1], [1, 2, 0, 3], [2, 1, 3, 0]]
    assert tree_distance(structure, 6)[0, :4, :4].tolist() == expected
    assert tree_distance(structure, 2)[0, 2, 3].item() == 2
    attn = BiasedSelfAttention(8, 2, num_node_types=2, max_distance=6)
    with torch.no_grad():
        attn.type_bias.copy_(torch.arange(8.0).view(2, 2, 2))
        attn.dist_bias.copy_(torch.arange(14.0).view(2, 7) * 100)
    bias = attn.dense_bias(structure)
    assert bias.shape == (1, 2, 5, 5)
    assert bias[0, 1, 2, 3].item() == 4 + 2 + 700 + 300  # head 1, types (1, 0), distance 3
    assert bool(torch.isinf(bias[..., 4]).all()) and bool(torch.isfinite(bias[..., :4]).all())
    with pytest.raises(ValueError, match="unknown attention backend"):
        attn(torch.zeros(1, 5, 8), structure, backend="sparse")


def test_config_round_trip():
    assert EncoderConfig.from_dict(CONFIG.to_dict()) == CONFIG
    with pytest.raises(ValueError, match="unknown encoder config keys: colour"):
        EncoderConfig.from_dict({**CONFIG.to_dict(), "colour": 1})


def test_typed_metadata_projection_is_the_per_type_affine_map_and_its_gradient(view):
    """``typed_meta`` (one matmul of the type-spread features) equals ``meta·W_meta[type] + b_meta[type]``
    token by token, and so do the gradients it sends to ``W_meta`` and ``b_meta``."""
    torch.manual_seed(3)
    node = HIREncoder(CONFIG).node
    torch.nn.init.normal_(node.meta_bias)
    types, meta = view.node_type, view.meta
    weight = torch.randn(*types.shape, CONFIG.dim)  # a cotangent that weighs every output differently
    fast = node.typed_meta(types, meta)
    (fast * weight).sum().backward()
    grads = node.meta_weight.grad.clone(), node.meta_bias.grad.clone()
    node.zero_grad()
    slow = torch.einsum("bsf,bsfd->bsd", meta, node.meta_weight[types]) + node.meta_bias[types]
    (slow * weight).sum().backward()
    assert fast.shape == (*types.shape, CONFIG.dim)
    torch.testing.assert_close(fast, slow)
    torch.testing.assert_close(grads, (node.meta_weight.grad, node.meta_bias.grad))
    assert len(types.unique()) == CONFIG.num_node_types  # every type's slot is exercised
