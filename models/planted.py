"""Small graphs with a planted two-level interest structure, built in torch (tests and benchmarks).

Users and items each carry a coarse interest ``c ∈ [0, C)`` and a fine interest ``f ∈ [0, C·F)``
nested in it (``f // F = c``). Each user engages with items of its own fine interest with
probability ``p_fine``, of another fine interest of its coarse interest with ``p_coarse``, and
with a uniformly random item otherwise. Events are spread over ``days`` days before ``end``;
entities appear (``first_seen``) at their first event, so a later cut-off holds new entities.

:func:`snapshot_at` (in memory) and :func:`write_snapshot` (files) turn events into a :class:`~hir.models.graph.TemporalGraph` at a cut-off with
the same aggregation as the ``graph_snapshot`` asset (DESIGN §5): per ``(src, dst, type)`` the
count, last timestamp and ``weight = Σ 2^(-(T - ts)/half_life)``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from hir.models.graph import TemporalGraph, build_csr

SECONDS_PER_DAY = 86_400.0
NODE_TYPES = ["user", "item"]
EDGE_TYPES = ["view", "click"]


@dataclass
class PlantedEvents:
    """Events between entities with planted interests.

    ``entity_id`` ``[N]`` int64, ``entity_type`` ``[N]`` (0 user, 1 item), ``coarse``/``fine``
    ``[N]`` planted interests; ``src``/``dst``/``edge_type``/``ts`` ``[E]`` events (``src`` a user,
    ``dst`` an item, ``ts`` unix seconds).
    """

    entity_id: torch.Tensor
    entity_type: torch.Tensor
    coarse: torch.Tensor
    fine: torch.Tensor
    src: torch.Tensor
    dst: torch.Tensor
    edge_type: torch.Tensor
    ts: torch.Tensor


def planted_events(
    users: int = 300,
    items: int = 200,
    coarse: int = 4,
    fine_per_coarse: int = 3,
    events_per_user: int = 12,
    days: float = 7.0,
    end: float = 1_767_225_600.0,
    p_fine: float = 0.6,
    p_coarse: float = 0.3,
    seed: int = 0,
) -> PlantedEvents:
    """Generate :class:`PlantedEvents` (see the module docstring for the model).

    Args:
        users, items: entity counts (ids ``0..users-1`` are users, the rest items).
        coarse: number of coarse interests ``C``; fine_per_coarse: ``F``.
        events_per_user: events drawn per user.
        days: span of the timestamps, ending at ``end`` (unix seconds).
        p_fine, p_coarse: probabilities of an event inside the user's fine / coarse interest.
        seed: seed of the torch generator.
    """
    g = torch.Generator().manual_seed(seed)
    n_fine = coarse * fine_per_coarse
    fine = torch.randint(0, n_fine, (users + items,), generator=g)
    item_fine = fine[users:]
    src = torch.arange(users).repeat_interleave(events_per_user)
    u_fine = fine[src]
    kind = torch.rand(src.numel(), generator=g)
    sibling = (u_fine // fine_per_coarse) * fine_per_coarse + torch.randint(0, fine_per_coarse, (src.numel(),), generator=g)
    target_fine = torch.where(kind < p_fine, u_fine, sibling)
    by_fine = [torch.nonzero(item_fine == f).flatten() for f in range(n_fine)]
    dst = torch.randint(0, items, (src.numel(),), generator=g)
    for f in range(n_fine):
        rows = torch.nonzero((target_fine == f) & (kind < p_fine + p_coarse)).flatten()
        if rows.numel() and by_fine[f].numel():
            dst[rows] = by_fine[f][torch.randint(0, by_fine[f].numel(), (rows.numel(),), generator=g)]
    ts = end - torch.rand(src.numel(), generator=g, dtype=torch.float64) * days * SECONDS_PER_DAY
    return PlantedEvents(
        entity_id=torch.arange(users + items),
        entity_type=torch.cat([torch.zeros(users, dtype=torch.int64), torch.ones(items, dtype=torch.int64)]),
        coarse=fine // fine_per_coarse,
        fine=fine,
        src=src,
        dst=dst + users,
        edge_type=(torch.rand(src.numel(), generator=g) < 0.3).long(),
        ts=ts,
    )


def _aggregate(events: PlantedEvents, cutoff: float, half_life_days: float) -> dict[str, torch.Tensor]:
    """Nodes (entities with an event before ``cutoff``) and edges aggregated per ``(src, dst, type)``."""
    keep = events.ts < cutoff
    src, dst, etype, ts = events.src[keep], events.dst[keep], events.edge_type[keep], events.ts[keep]
    present = torch.zeros(events.entity_id.numel(), dtype=torch.bool)
    present[src] = True
    present[dst] = True
    entity = torch.nonzero(present).flatten()
    node_of = torch.full((events.entity_id.numel(),), -1, dtype=torch.int64)
    node_of[entity] = torch.arange(entity.numel())
    n = entity.numel()
    key = (node_of[src] * n + node_of[dst]) * len(EDGE_TYPES) + etype
    unique, inverse = torch.unique(key, return_inverse=True)
    decay = torch.pow(2.0, -(cutoff - ts) / (half_life_days * SECONDS_PER_DAY))
    e_src, e_dst = (unique // len(EDGE_TYPES)) // n, (unique // len(EDGE_TYPES)) % n
    first = torch.full((n,), float(cutoff), dtype=torch.float64)
    first.scatter_reduce_(0, node_of[src], ts, "amin").scatter_reduce_(0, node_of[dst], ts, "amin")
    ones = torch.ones(src.numel())
    return {
        "entity": entity,
        "degree": torch.bincount(torch.cat([e_src, e_dst]), minlength=n).double(),
        "age_days": (cutoff - first) / SECONDS_PER_DAY,
        "activity": torch.zeros(n, dtype=torch.float64).index_add_(0, node_of[src], ones.double()).index_add_(0, node_of[dst], ones.double()),
        "src": e_src,
        "dst": e_dst,
        "edge_type": unique % len(EDGE_TYPES),
        "weight": torch.zeros(unique.numel(), dtype=torch.float64).index_add_(0, inverse, decay),
        "count": torch.zeros(unique.numel(), dtype=torch.int64).index_add_(0, inverse, torch.ones(ts.numel(), dtype=torch.int64)),
        "last_ts": torch.full((unique.numel(),), -1e18, dtype=torch.float64).scatter_reduce_(0, inverse, ts, "amax"),
    }


def snapshot_at(events: PlantedEvents, cutoff: float, half_life_days: float = 3.0) -> tuple[TemporalGraph, torch.Tensor]:
    """The snapshot of ``events`` at ``cutoff`` and the entity index of each node.

    Only events with ``ts < cutoff`` count; a node is an entity with at least one such event.

    Returns:
        ``(graph, entity)`` where ``entity[i]`` indexes ``events.entity_id`` for node ``i``.
    """
    a = _aggregate(events, cutoff, half_life_days)
    n = a["entity"].numel()
    features = torch.stack([a["degree"], a["age_days"], a["activity"]], dim=1).float()

    def csr(sel: torch.Tensor):
        return build_csr(n, a["src"][sel], a["dst"][sel], a["edge_type"][sel], a["weight"][sel], a["last_ts"][sel], a["count"][sel])

    graph = TemporalGraph(
        cutoff=float(cutoff),
        entity_id=events.entity_id[a["entity"]],
        node_type=events.entity_type[a["entity"]],
        node_features=torch.log1p(features.clamp_min(0)),
        node_types=list(NODE_TYPES),
        edge_types=list(EDGE_TYPES),
        csr=csr(torch.ones_like(a["src"], dtype=torch.bool)),
        by_type={name: csr(a["edge_type"] == i) for i, name in enumerate(EDGE_TYPES)},
    )
    return graph, a["entity"]


def write_snapshot(events: PlantedEvents, cutoff: float, folder: str | Path, half_life_days: float = 3.0) -> Path:
    """Write the snapshot at ``cutoff`` in the ``graph_snapshot`` layout (see :mod:`hir.models.graph`)."""
    a = _aggregate(events, cutoff, half_life_days)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    types = events.entity_type[a["entity"]]
    nodes = pa.table({
        "entity_id": events.entity_id[a["entity"]].numpy(),
        "entity_type": [NODE_TYPES[t] for t in types.tolist()],
        "type_id": types.numpy(),
        "degree": a["degree"].numpy(),
        "age_days": a["age_days"].numpy(),
        "activity": a["activity"].numpy(),
    })
    edges = pa.table({
        "src": a["src"].numpy(),
        "dst": a["dst"].numpy(),
        "edge_type": [EDGE_TYPES[t] for t in a["edge_type"].tolist()],
        "edge_type_id": a["edge_type"].numpy(),
        "count": a["count"].numpy(),
        "last_ts": a["last_ts"].numpy(),
        "weight": a["weight"].numpy(),
    })
    pq.write_table(nodes, folder / "nodes.parquet")
    pq.write_table(edges, folder / "edges.parquet")
    (folder / "meta.json").write_text(json.dumps({"cutoff": cutoff, "node_types": NODE_TYPES, "edge_types": EDGE_TYPES}))
    return folder


def split_edges(graph: TemporalGraph, held_out: float, seed: int = 0) -> tuple[TemporalGraph, torch.Tensor]:
    """Hold out a share of the stored (undirected) edges: the graph without them and the
    held-out ``[H, 3]`` rows ``(src, dst, edge_type)`` (node indices)."""
    rows, cols = graph.csr.to_edge_list()
    stored = torch.nonzero(rows < cols).flatten()
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(graph.csr.num_edges, dtype=torch.bool)
    mask[stored[torch.rand(stored.numel(), generator=g) < held_out]] = True
    hold = torch.stack([rows[mask], cols[mask], graph.csr.edge_type[mask]], dim=1)
    keep = stored[~mask[stored]]
    c = graph.csr

    def csr_of(sel: torch.Tensor):
        return build_csr(graph.num_nodes, rows[sel], cols[sel], c.edge_type[sel], c.weight[sel], c.last_ts[sel], c.count[sel])

    reduced = TemporalGraph(
        cutoff=graph.cutoff, entity_id=graph.entity_id, node_type=graph.node_type,
        node_features=graph.node_features, node_types=graph.node_types, edge_types=graph.edge_types,
        csr=csr_of(keep), by_type={name: csr_of(keep[c.edge_type[keep] == i]) for i, name in enumerate(graph.edge_types)},
    )
    return reduced, hold
