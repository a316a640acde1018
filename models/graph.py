"""A temporal graph snapshot as torch CSR tensors.

A snapshot at cut-off ``T`` (see ``hir.assets.graph``) is two Parquet files and a JSON file:

* ``nodes.parquet``: ``entity_id, entity_type, type_id, degree, age_days, activity`` — one row per
  entity that exists before ``T``, sorted by ``entity_id``; row ``i`` is node ``i``.
* ``edges.parquet``: ``src, dst, edge_type, edge_type_id, count, last_ts, weight`` — one row per
  ``(src, dst, edge_type)`` with ``src``/``dst`` as node indices, ``last_ts`` in unix seconds and the
  time-decayed ``weight = Σ 2^(-(T - ts) / half_life)``.
* ``meta.json``: ``cutoff`` (unix seconds), ``node_types``, ``edge_types``.

:func:`load_snapshot` turns them into a :class:`TemporalGraph`: the merged, symmetric CSR over all
edge types (each stored edge appears in both directions) with per-entry edge attributes, and a CSR
per edge type (the merged CSR's entries of that type, in the same order). Each node's entries are
in time order (by ``last_ts``), so the entries of node ``i`` before a time ``t`` are a prefix of its
slice that :class:`TimeIndex` finds by binary search, and :func:`node_features_at` gives the node
metadata as of ``t``. Arrow columns of the dtype torch needs, in one chunk and without nulls, are
wrapped, not copied (``entity_id``, ``type_id``, ``src``, ``dst``, ``edge_type_id``, ``count``,
``last_ts`` and ``weight`` are written in those dtypes); other columns are converted once. A
snapshot whose edges name a node that is not in ``nodes.parquet`` is refused with a
:class:`SnapshotError`.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

SECONDS_PER_DAY = 86_400.0


class SnapshotError(ValueError):
    """A snapshot folder that breaks the layout above; the message names the file and the problem."""


@dataclass
class CSR:
    """Compressed sparse rows: neighbours of node ``i`` are ``indices[indptr[i]:indptr[i+1]]``."""

    indptr: torch.Tensor  # int64 [N + 1]
    indices: torch.Tensor  # int64 [E]
    edge_type: torch.Tensor  # int64 [E]
    weight: torch.Tensor  # float32 [E]
    last_ts: torch.Tensor  # float64 [E], unix seconds
    count: torch.Tensor  # float32 [E]

    @property
    def num_edges(self) -> int:
        return int(self.indices.numel())

    def degree(self) -> torch.Tensor:
        return self.indptr[1:] - self.indptr[:-1]

    def is_time_sorted(self) -> bool:
        """True when every node's entries are in ``last_ts`` order (as :func:`build_csr` writes them)."""
        if self.num_edges < 2:
            return True
        rows = self.rows()
        same_row = rows[1:] == rows[:-1]
        return bool((self.last_ts[1:] >= self.last_ts[:-1])[same_row].all())

    def rows(self) -> torch.Tensor:
        """The row (source node) of every entry, ``int64 [E]``, in CSR order."""
        return torch.repeat_interleave(torch.arange(self.indptr.numel() - 1), self.degree())

    def to_edge_list(self) -> torch.Tensor:
        """``[2, E]`` (row, col) pairs in CSR order."""
        return torch.stack([self.rows(), self.indices])

    def split_by_type(self, num_types: int) -> list["CSR"]:
        """One CSR per edge type ``0 … num_types-1``: this CSR's entries of that type, in the same order.

        One stable sort by type makes each type a contiguous run, so the split costs
        ``O(E log E)`` once instead of a pass over all entries per type.
        """
        rows = self.rows()
        order = torch.argsort(self.edge_type, stable=True)
        bounds = torch.searchsorted(self.edge_type[order], torch.arange(num_types + 1, dtype=self.edge_type.dtype)).tolist()
        parts = []
        for start, end in zip(bounds[:-1], bounds[1:]):
            take = order[start:end]
            indptr = torch.zeros_like(self.indptr)
            indptr[1:] = torch.cumsum(torch.bincount(rows[take], minlength=self.indptr.numel() - 1), 0)
            parts.append(
                CSR(
                    indptr=indptr,
                    indices=self.indices[take],
                    edge_type=self.edge_type[take],
                    weight=self.weight[take],
                    last_ts=self.last_ts[take],
                    count=self.count[take],
                )
            )
        return parts


@dataclass
class TemporalGraph:
    """A snapshot at ``cutoff``: node attributes, the merged symmetric CSR and one CSR per edge type."""

    cutoff: float
    entity_id: torch.Tensor  # int64 [N]
    node_type: torch.Tensor  # int64 [N]
    node_features: torch.Tensor  # float32 [N, F]: log1p(degree), log1p(age_days), log1p(activity)
    node_types: list[str]
    edge_types: list[str]
    csr: CSR
    by_type: dict[str, CSR] = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return int(self.entity_id.numel())


@dataclass
class TimeIndex:
    """Which entries of a node lie strictly before a time: one binary search over a time-sorted CSR.

    The ``U`` distinct ``last_ts`` values, sorted, give each entry ``e`` of row ``r`` a rank and the
    key ``k_e = r · (U + 1) + rank(last_ts_e)``; keys increase along a time-sorted CSR. The entries
    of node ``i`` with ``last_ts < t`` are then ``indptr[i] … end − 1`` with
    ``end = searchsorted(k, i · (U + 1) + #{distinct times < t})`` — one ``torch.searchsorted`` for
    a whole batch of ``(node, t)`` queries and no copy of the graph per query (``N · (U + 1)`` must
    stay below ``2⁶³``).

    Attributes:
        indptr: the CSR's row pointers ``[N + 1]``.
        times: ``[U]`` float64 distinct entry times, increasing.
        key: ``[E]`` int64 entry keys (above).
        count_prefix: ``[E + 1]`` float64, ``Σ_{e' < e} count_e'`` in CSR order, so the events of a
            run of entries ``a … b − 1`` are ``count_prefix[b] − count_prefix[a]``.
    """

    indptr: torch.Tensor
    times: torch.Tensor
    key: torch.Tensor
    count_prefix: torch.Tensor

    @classmethod
    def of(cls, csr: CSR) -> TimeIndex:
        """The index of ``csr``, whose rows must be time-sorted (:func:`build_csr` writes them so)."""
        if not csr.is_time_sorted():
            raise ValueError("the CSR's rows are not in last_ts order; build it with build_csr")
        times, rank = torch.unique(csr.last_ts, sorted=True, return_inverse=True)
        prefix = torch.cat([csr.count.new_zeros(1, dtype=torch.float64), torch.cumsum(csr.count.double(), 0)])
        return cls(indptr=csr.indptr, times=times, key=csr.rows() * (times.numel() + 1) + rank, count_prefix=prefix)

    def rank(self, times: torch.Tensor) -> torch.Tensor:
        """``#{distinct entry times < t}`` per time: the form :meth:`end_at_rank` takes a time in, so
        a walker that queries many nodes at one time ranks it once."""
        return torch.searchsorted(self.times, times.to(torch.float64).contiguous(), side="left")

    def end_at_rank(self, nodes: torch.Tensor, rank: torch.Tensor) -> torch.Tensor:
        """:meth:`end_before` with the times given as :meth:`rank` of them."""
        return torch.searchsorted(self.key, (nodes * (self.times.numel() + 1) + rank).contiguous(), side="left")

    def end_before(self, nodes: torch.Tensor, times: torch.Tensor) -> torch.Tensor:
        """``end`` of the same shape as ``nodes``: entries ``indptr[node] … end − 1`` are the node's
        entries with ``last_ts < time`` (``end = indptr[node]`` when there is none).

        Args:
            nodes: int64 node indices, any shape.
            times: unix seconds, the shape of ``nodes``.
        """
        return self.end_at_rank(nodes, self.rank(times))


def node_features_at(
    graph: TemporalGraph, index: TimeIndex, nodes: torch.Tensor, times: torch.Tensor, activity_days: float = 7.0
) -> torch.Tensor:
    """Node metadata ``[..., 3]`` as of ``times``, in the layout of ``graph.node_features``, from
    the past of each time only.

    ``[log1p(degree_t), log1p(age_t), log1p(activity_t)]`` with ``degree_t`` the node's CSR entries
    with ``last_ts < t`` (the snapshot's degree when ``t = T``), ``age_t = max(age_T − (T − t)/1 day, 0)``
    (exact: age counts from a fixed first-seen time) and ``activity_t`` the events of the node's
    entries with ``t − activity_days ≤ last_ts < t``. An edge's events all happen at or before its
    ``last_ts``, so ``activity_t`` counts past events only; it approximates the snapshot's events in
    ``[T − 7 days, T)``, which aggregated edges cannot give exactly.

    Args:
        graph: the snapshot (its ``cutoff`` ``T`` and ``node_features``).
        index: ``TimeIndex.of(graph.csr)``.
        nodes: int64 node indices, any shape.
        times: unix seconds ``t ≤ T``, broadcastable to ``nodes`` (``[B, 1]`` for one time per
            row of ``[B, S]`` nodes ranks each time once).
        activity_days: the activity window in days.
    """
    width = graph.node_features.shape[1]
    if width != 3:
        raise ValueError(f"node_features_at needs the snapshot's (degree, age, activity) features; got {width} columns")
    times = times.to(torch.float64)
    start = index.indptr[nodes]
    end = index.end_at_rank(nodes, index.rank(times))
    window = index.end_at_rank(nodes, index.rank(times - activity_days * SECONDS_PER_DAY))
    age_at_cutoff = torch.expm1(graph.node_features[nodes, 1].double())
    age = (age_at_cutoff - (graph.cutoff - times) / SECONDS_PER_DAY).clamp_min(0)
    activity = index.count_prefix[end] - index.count_prefix[window]
    return torch.log1p(torch.stack([(end - start).double(), age, activity], dim=-1)).float()


def _column(table: pa.Table, name: str, dtype: np.dtype) -> torch.Tensor:
    """A column as a tensor, zero-copy when it is one chunk of ``dtype`` without nulls."""
    col = table.column(name)
    if col.num_chunks == 1 and col.null_count == 0 and col.type == pa.from_numpy_dtype(dtype):
        array = col.chunk(0).to_numpy(zero_copy_only=True)
    else:
        array = col.to_numpy().astype(dtype, copy=False)
    with warnings.catch_warnings():
        # Arrow buffers are immutable; torch warns about that, and nothing here writes through them.
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array)


def build_csr(
    num_nodes: int,
    src: torch.Tensor,
    dst: torch.Tensor,
    edge_type: torch.Tensor,
    weight: torch.Tensor,
    last_ts: torch.Tensor,
    count: torch.Tensor,
    symmetric: bool = True,
) -> CSR:
    """CSR over ``num_nodes`` from an edge list; ``symmetric`` adds each edge's reverse.

    Args:
        num_nodes: N; ``src`` and ``dst`` are node indices in ``[0, N)``.
        src, dst: int64 ``[E]`` endpoints.
        edge_type: ``[E]`` edge-type ids; weight: ``[E]`` decayed weights;
        last_ts: ``[E]`` unix seconds of the newest event; count: ``[E]`` events per edge.
        symmetric: also store ``dst → src`` for every edge (a self-loop then appears twice).

    Entries are ordered by ``(row, last_ts)``, ties in input order: each node's slice is in time
    order, oldest first.
    """
    if symmetric:
        src, dst = torch.cat([src, dst]), torch.cat([dst, src])
        edge_type, weight = edge_type.repeat(2), weight.repeat(2)
        last_ts, count = last_ts.repeat(2), count.repeat(2)
    order = torch.argsort(last_ts, stable=True)
    order = order[torch.argsort(src[order], stable=True)]
    counts = torch.bincount(src, minlength=num_nodes)
    indptr = torch.zeros(num_nodes + 1, dtype=torch.int64)
    indptr[1:] = torch.cumsum(counts, 0)
    return CSR(
        indptr=indptr,
        indices=dst[order].to(torch.int64),
        edge_type=edge_type[order].to(torch.int64),
        weight=weight[order].to(torch.float32),
        last_ts=last_ts[order].to(torch.float64),
        count=count[order].to(torch.float32),
    )


def _check_endpoints(folder: Path, src: torch.Tensor, dst: torch.Tensor, num_nodes: int) -> None:
    for name, ends in (("src", src), ("dst", dst)):
        bad = (ends < 0) | (ends >= num_nodes)
        if bool(bad.any()):
            row = int(torch.nonzero(bad)[0])
            raise SnapshotError(
                f"{folder / 'edges.parquet'}: row {row}: {name}={int(ends[row])} is not a node "
                f"(nodes.parquet has {num_nodes} rows)"
            )


def _read(folder: Path, name: str, required: tuple[str, ...]) -> pa.Table:
    path = folder / name
    if not path.exists():
        raise SnapshotError(f"{path}: missing; is {folder} a graph_snapshot partition?")
    table = pq.read_table(path)
    missing = [c for c in required if c not in table.column_names]
    if missing:
        raise SnapshotError(f"{path}: missing column(s) {', '.join(missing)}")
    for column in required:
        if table.column(column).null_count:
            raise SnapshotError(f"{path}: column {column} has {table.column(column).null_count} null value(s)")
    return table


def load_snapshot(folder: str | Path) -> TemporalGraph:
    """Load a snapshot folder written by the ``graph_snapshot`` asset (layout in the module docstring)."""
    folder = Path(folder)
    meta = json.loads((folder / "meta.json").read_text())
    nodes = _read(folder, "nodes.parquet", ("entity_id", "type_id", "degree", "age_days", "activity"))
    edges = _read(folder, "edges.parquet", ("src", "dst", "edge_type_id", "count", "last_ts", "weight"))
    num_nodes = nodes.num_rows
    features = torch.stack(
        [
            torch.log1p(_column(nodes, name, np.dtype(np.float64)).clamp_min(0)).float()
            for name in ("degree", "age_days", "activity")
        ],
        dim=1,
    )
    src = _column(edges, "src", np.dtype(np.int64))
    dst = _column(edges, "dst", np.dtype(np.int64))
    _check_endpoints(folder, src, dst, num_nodes)
    etype = _column(edges, "edge_type_id", np.dtype(np.int64))
    weight = _column(edges, "weight", np.dtype(np.float64)).float()
    last_ts = _column(edges, "last_ts", np.dtype(np.float64))
    count = _column(edges, "count", np.dtype(np.int64)).float()
    merged = build_csr(num_nodes, src, dst, etype, weight, last_ts, count)
    return TemporalGraph(
        cutoff=float(meta["cutoff"]),
        entity_id=_column(nodes, "entity_id", np.dtype(np.int64)),
        node_type=_column(nodes, "type_id", np.dtype(np.int64)),
        node_features=features,
        node_types=list(meta["node_types"]),
        edge_types=list(meta["edge_types"]),
        csr=merged,
        by_type=dict(zip(meta["edge_types"], merged.split_by_type(len(meta["edge_types"])))),
    )
