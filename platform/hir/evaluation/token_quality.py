"""Token quality (DESIGN §10): agreement of hir's clusters with known labels, and collapse.

Groupings: the embeddings' ``coarse_prototype`` and ``fine_prototype`` and each level of the
partition's BoM codes (``code_1`` coarse first). For each grouping:

* ``top_share`` — collapse: the share of entities on the most used cluster (1/K when uniform);
  ``used`` — clusters holding at least one entity; ``sizes`` — cluster sizes, largest first.
* ``nmi_coarse`` / ``nmi_fine`` — normalised mutual information (arithmetic mean) with the planted
  interests of ``planted_truth`` (synthetic data; the fine label is the pair coarse/fine).
* ``purity`` — ``Σ_clusters max_label count / N`` over entities with a category or genre
  (relations whose name holds ``categ`` or ``genre``; the smallest target id when several).

``dense_recall``: how much of the dense ranking the bags keep — for a seeded sample of users, the
share of the top 100 entities of a serving type by ``cos(u, i) / T + log(1 + p_i)`` (the embedding)
that the top 100 by ``o(u, i) / τ + log(1 + p_i)`` (the bags' overlap) also holds, per type; and
the same with the prior left out of both (``no_prior``).

And ``planted_retrieval`` (synthetic data): for a seeded sample of users, the share of their top-K
ads retrieved from the BoM index (``hir retrieve --type ad``) whose planted coarse interest is the
user's, beside ``chance`` — the mean share of all indexed ads with the user's coarse interest.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

_LABELS = """
SELECT src AS entity_id, min(dst) AS label FROM relations
WHERE lower(relation) LIKE '%categ%' OR lower(relation) LIKE '%genre%' GROUP BY src
"""


def collapse(labels: np.ndarray) -> dict:
    """``top_share``, ``used`` and ``sizes`` (largest first) of cluster ``labels``."""
    _, counts = np.unique(labels, return_counts=True)
    sizes = np.sort(counts)[::-1]
    return {"top_share": round(float(sizes[0] / sizes.sum()), 6) if sizes.size else None,
            "used": int(sizes.size), "sizes": sizes.tolist()}


def purity(clusters: np.ndarray, labels: np.ndarray) -> float:
    """``Σ_c max_l |{e in c with label l}| / N``."""
    frame = pd.DataFrame({"c": clusters, "l": labels})
    return float(frame.groupby(["c", "l"]).size().groupby(level=0).max().sum() / len(frame))


def _table_exists(con, name: str) -> bool:
    return bool(con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]).fetchone()[0])


def dense_recall(vectors: np.ndarray, bags, types: np.ndarray, prior: np.ndarray, bag_t: float, dense_t: float,
                 users: int = 300, k: int = 100, seed: int = 0, query=None) -> dict:
    """Recall of the bags' top ``k`` against the embedding's own top ``k`` (see the module docstring).

    Args:
        vectors: ``[N, d]`` embeddings; bags: ``[N, T]`` unit-norm bag weights (scipy CSR), same rows;
        types: entity type per row; prior: ``log(1 + p)`` per row; bag_t: the bags' ``τ``;
        dense_t: the encoder's ``T``; users: users sampled (seeded by ``seed``); k: the cut-off;
        query: ``query(user_rows, kind)`` → the users' bags for retrieving ``kind`` (``[n, T]`` CSR,
            e.g. query bags, :meth:`hir.tokens.bom.QueryProbe.matrix`); their own bags when ``None``.
    Returns ``{type: {"with_prior": r, "no_prior": r}}`` for each serving type with more than ``k``
    entities (empty without users).
    """
    from hir.tokens.bom import SERVING_TYPES

    user_rows = np.flatnonzero(types == "user")
    if not user_rows.size:
        return {}
    sample = np.random.default_rng(seed).choice(user_rows, min(users, user_rows.size), replace=False)
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    out = {}
    for kind in SERVING_TYPES:
        items = np.flatnonzero(types == kind)
        if items.size <= k:
            continue
        dense = unit[sample] @ unit[items].T / dense_t
        user_bags = bags[sample] if query is None else query(sample, kind)
        overlap = (user_bags @ bags[items].T).toarray() / bag_t
        out[kind] = {"with_prior": _top_overlap(dense + prior[items], overlap + prior[items], k),
                     "no_prior": _top_overlap(dense, overlap, k)}
    return out


def _top_overlap(reference: np.ndarray, candidate: np.ndarray, k: int) -> float:
    """Mean over rows of ``|top_k(reference) ∩ top_k(candidate)| / k``."""
    ref = np.argpartition(-reference, k - 1, axis=1)[:, :k]
    got = np.argpartition(-candidate, k - 1, axis=1)[:, :k]
    return round(float(np.mean([np.intersect1d(a, b).size / k for a, b in zip(ref, got)])), 4)


def planted_retrieval(store, coarse: dict[int, int], k: int = 20, max_users: int = 2000, seed: int = 0) -> dict | None:
    """Planted coarse-interest agreement of users' top-``k`` retrieved ads (see the module docstring).

    Args:
        store: the partition's :class:`~hir.tokens.bom.TokenStore`; coarse: entity id → planted coarse
            interest; k: ads retrieved per user; max_users: users sampled (seeded by ``seed``).
    Returns ``None`` when the index holds no ads or no user has a planted interest.
    """
    import torch

    if "ad" not in store.index.type_names:
        return None
    ids = store.index.entity_ids.numpy()
    ad_coarse = np.array([coarse.get(int(e), -1) for e in ids[store.index.type_mask("ad").numpy()]])
    bags = store.bags.select(["entity_type", "entity_id", "tokens", "weights"]).to_pylist()
    users = [b for b in bags if b["entity_type"] == "user" and b["entity_id"] in coarse and b["tokens"]]
    if not users or not ad_coarse.size:
        return None
    pick = np.random.default_rng(seed).choice(len(users), size=min(max_users, len(users)), replace=False)
    hits = total = 0
    chance = []
    for bag in (users[n] for n in sorted(pick)):
        rows, _ = store.index.search(torch.tensor(bag["tokens"]), torch.tensor(bag["weights"]), k, entity_type="ad")
        interest = coarse[bag["entity_id"]]
        hits += sum(coarse.get(int(ids[r]), -1) == interest for r in rows.tolist())
        total += len(rows)
        chance.append(float((ad_coarse == interest).mean()))
    return {"k": k, "users": len(pick), "agreement": round(hits / max(total, 1), 6),
            "chance": round(float(np.mean(chance)), 6)}


def token_quality_figures(warehouse, embeddings_path: Path, codes_path: Path, store=None, seed: int = 0) -> dict:
    """Every figure of the module docstring for one partition.

    Args:
        warehouse: the ``Warehouse`` resource (planted_truth, relations).
        embeddings_path: the partition's ``embeddings.parquet``; codes_path: its ``codes.parquet``
            (BoM levels are left out when absent).
        store: the partition's :class:`~hir.tokens.bom.TokenStore` for ``planted_retrieval`` (left out
            when ``None``); seed: the user sample's seed.
    """
    from sklearn.metrics import normalized_mutual_info_score as nmi

    emb = pq.read_table(embeddings_path, columns=["entity_id", "coarse_prototype", "fine_prototype"]).to_pandas()
    frame = emb.rename(columns={"coarse_prototype": "prototype_coarse", "fine_prototype": "prototype_fine"})
    if Path(codes_path).exists():
        codes = pq.read_table(codes_path).to_pandas()
        levels = [c for c in codes.columns if c.startswith("code_")]
        frame = frame.merge(codes[["entity_id", *levels]].rename(columns={c: f"bom_level_{c[5:]}" for c in levels}),
                            on="entity_id", how="left")
    with warehouse.connect(read_only=True) as con:
        truth = con.execute("SELECT entity_id, coarse_interest, fine_interest FROM planted_truth").fetch_df() \
            if _table_exists(con, "planted_truth") else None
        labels = con.execute(_LABELS).fetch_df()
    groupings = {}
    for column in [c for c in frame.columns if c.startswith(("prototype_", "bom_level_"))]:
        present = frame[frame[column].notna()]
        row = collapse(present[column].to_numpy())
        if truth is not None and len(truth):
            joined = present.merge(truth[truth["coarse_interest"].notna()], on="entity_id")
            if len(joined):
                row["nmi_coarse"] = round(float(nmi(joined["coarse_interest"], joined[column])), 6)
                fine = joined[joined["fine_interest"].notna() & (joined["fine_interest"] >= 0)]
                if len(fine):
                    pair = fine["coarse_interest"].astype(str) + "/" + fine["fine_interest"].astype(str)
                    row["nmi_fine"] = round(float(nmi(pair, fine[column])), 6)
        labelled = present.merge(labels, on="entity_id")
        if len(labelled):
            row["purity"] = round(purity(labelled[column].to_numpy(), labelled["label"].to_numpy()), 6)
            row["labelled_entities"] = int(len(labelled))
        groupings[column] = row
    planted = None
    if store is not None and truth is not None and len(truth):
        known = truth[truth["coarse_interest"].notna()]
        planted = planted_retrieval(store, dict(zip(known["entity_id"].astype(int), known["coarse_interest"].astype(int))),
                                    seed=seed)
    return {"entities": int(len(frame)), "groupings": groupings, "planted_retrieval": planted,
            "labels": {"planted_truth": truth is not None and bool(len(truth)), "categories": int(len(labels))}}
