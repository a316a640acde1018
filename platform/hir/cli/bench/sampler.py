"""Broad-view sampling speed: `hir bench sampler --json`.

Samples broad views (default :class:`~hir.models.sampler.SamplerConfig`) for batches of uniformly
drawn anchors on the newest ``graph_snapshot`` partition under the data home; where none exists, on
a synthetic snapshot built here with power-law degrees (``--nodes`` nodes, ``--edges`` edges,
endpoints drawn with probability ∝ rank^-1.1). ``"graph"`` in the result says which was used.
``tokens_per_s`` counts non-padding tokens.
"""

from __future__ import annotations

import argparse
import time

from hir.settings import Settings

NODE_TYPES = ["user", "ad", "campaign", "advertiser", "product", "category", "brand"]
EDGE_TYPES = ["impression", "click", "conversion", "belongs_to"]
DAY = 86_400.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch", type=int, default=256, help="anchors per batch")
    parser.add_argument("--batches", type=int, default=10, help="measured batches (after one warm-up)")
    parser.add_argument("--nodes", type=int, default=50_000, help="synthetic graph nodes")
    parser.add_argument("--edges", type=int, default=1_000_000, help="synthetic graph edges (before symmetrisation)")
    parser.add_argument("--seed", type=int, default=0)


def synthetic_graph(nodes: int, edges: int, seed: int):
    """A skewed :class:`TemporalGraph`: power-law endpoints, 90 days of history, decayed weights."""
    import torch

    from hir.models.graph import TemporalGraph, build_csr

    g = torch.Generator().manual_seed(seed)
    popularity = torch.arange(1, nodes + 1, dtype=torch.float64) ** -1.1
    popularity = popularity[torch.randperm(nodes, generator=g)]
    src = torch.multinomial(popularity, edges, replacement=True, generator=g)
    dst = torch.multinomial(popularity, edges, replacement=True, generator=g)
    cutoff = 1_700_000_000.0
    age = torch.rand(edges, generator=g, dtype=torch.float64) * 90 * DAY
    count = 1 + torch.poisson(torch.full((edges,), 0.5), generator=g)
    weight = (count * torch.exp2(-age / (7 * DAY))).float()
    csr = build_csr(nodes, src, dst, torch.randint(0, len(EDGE_TYPES), (edges,), generator=g), weight, cutoff - age - 1, count)
    degree = csr.degree().double()
    features = torch.stack([torch.log1p(degree), torch.log1p(torch.rand(nodes, generator=g, dtype=torch.float64) * 365), torch.log1p(degree / 90)], 1)
    return TemporalGraph(
        cutoff=cutoff,
        entity_id=torch.arange(nodes, dtype=torch.int64) + 1,
        node_type=torch.randint(0, len(NODE_TYPES), (nodes,), generator=g),
        node_features=features.float(),
        node_types=NODE_TYPES,
        edge_types=EDGE_TYPES,
        csr=csr,
    )


def _latest_snapshot(settings: Settings):
    """``(graph, label)`` of the newest snapshot partition, or None."""
    from hir.models.graph import load_snapshot
    from hir.storage import META_FILE, Artifacts

    catalogue = Artifacts(settings.artifacts_dir)
    for partition in reversed(catalogue.partitions("graph_snapshot")):
        folder = catalogue.snapshot_dir(partition)
        if (folder / META_FILE).exists():
            return load_snapshot(folder), f"snapshot:{folder}"
    return None


def run(args: argparse.Namespace, settings: Settings) -> dict:
    import torch

    from hir.models.sampler import ViewSampler

    found = _latest_snapshot(settings)
    if found is None:
        graph, label = synthetic_graph(args.nodes, args.edges, args.seed), f"synthetic:{args.nodes}n/{args.edges}e power-law"
    else:
        graph, label = found
    sampler = ViewSampler(graph)
    generator = torch.Generator().manual_seed(args.seed)
    anchors = torch.randint(0, graph.num_nodes, (args.batches + 1, args.batch), generator=generator)
    sampler.broad(anchors[0], generator)
    tokens = 0
    start = time.perf_counter()
    for batch in anchors[1:]:
        tokens += int((~sampler.broad(batch, generator).pad).sum())
    seconds = time.perf_counter() - start
    sampled = args.batch * args.batches
    return {
        "anchors_per_s": round(sampled / seconds, 1),
        "tokens_per_s": round(tokens / seconds, 1),
        "graph": label,
        "nodes": graph.num_nodes,
        "edges": graph.csr.num_edges,
        "batch": args.batch,
        "tokens_per_view": round(tokens / sampled, 2),
    }
