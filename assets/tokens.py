"""Tokens stage: Bag-of-Meaning codebooks, bags, inverted index and token descriptions (DESIGN §8).

``bom_quantizer`` trains the hierarchical additive quantizer (:mod:`hir.models.quantizer`) on the
partition's entity embeddings, centred per type; ``bom_tokens`` turns codes and engagement into weighted bags
(:mod:`hir.tokens.bom`); ``bom_index`` stores the inverted index as Parquet postings; ``token_descriptions``
names every token from the world knowledge of the entities holding it.
"""

import dagster as dg
from hir.partitions import DAILY, cutoff_of
from hir.resources import ArtifactStore, SettingsResource, TorchRuntime, Warehouse
from hir.tables import markdown_table

PREVIEW_ROWS = 12

_LABELS_SQL = """
WITH direct AS (
    SELECT r.src AS entity_id, r.dst AS label_id
    FROM relations r JOIN entities l ON l.entity_id = r.dst
    WHERE l.entity_type IN ('category', 'genre') AND (r.valid_from IS NULL OR r.valid_from < ?)
), reach AS (
    SELECT entity_id, label_id FROM direct
    UNION
    SELECT r.src, d.label_id FROM relations r JOIN direct d ON d.entity_id = r.dst
    WHERE r.valid_from IS NULL OR r.valid_from < ?
)
SELECT reach.entity_id, coalesce(nullif(trim(c.text), ''), l.source_key) AS label
FROM reach JOIN entities l ON l.entity_id = reach.label_id
LEFT JOIN content c ON c.entity_id = reach.label_id
"""

_TEXTS_SQL = """
SELECT c.entity_id, c.text FROM content c JOIN entities e USING (entity_id)
WHERE c.text IS NOT NULL AND (e.first_seen IS NULL OR e.first_seen < ?)
"""


def _require(path, what: str):
    if not path.exists():
        raise dg.Failure(description=f"{what}: {path} is missing; materialise that partition first")
    return path


def _usage_plot(usage: list[dict], codes) -> dg.MetadataValue:
    """Per level, codeword counts sorted from most to least used."""
    import numpy as np
    from hir.plots import figure, png_markdown

    fig, axes = figure(3.2 * len(usage), 2.8, ncols=len(usage))
    axes = np.atleast_1d(axes)
    for ax, stats, column in zip(axes, usage, codes.T):
        counts = np.sort(np.bincount(column, minlength=stats["codewords"]))[::-1]
        ax.bar(np.arange(counts.size), counts, width=1.0)
        ax.set(title=f"level {stats['level']} (K={stats['codewords']})", xlabel="codeword rank", ylabel="entities")
    fig.tight_layout()
    return png_markdown(fig, "code usage")


@dg.asset(
    partitions_def=DAILY,
    deps=["entity_embeddings"],
    group_name="tokens",
    kinds={"pytorch", "safetensors"},
    owners=["team:hir"],
    description=(
        "Hierarchical additive quantization of the entity embeddings, unit-normalised and centred per "
        "type: M codebooks (coarse first, "
        "HIR_BOM_CODES codewords each), x ≈ Σ_m C_m[i_m], trained by residual k-means then "
        "alternating least-squares codebooks and ICM + local-search codes."
    ),
)
def bom_quantizer(context: dg.AssetExecutionContext, artifacts: ArtifactStore, torch_runtime: TorchRuntime, hir_settings: SettingsResource):
    from hir.storage import CODES_FILE, QUANTIZER_REPORT_FILE, write_json, write_parquet
    from hir.tokens.bom import codes_table, read_embeddings, train_quantizer

    settings = hir_settings.get()
    key = context.partition_key
    emb = read_embeddings(_require(artifacts.catalogue.embeddings(key), "entity_embeddings"))
    quantizer, codes, report = train_quantizer(emb, settings, torch_runtime.setup())
    with artifacts.write_partition("bom_quantizer", key) as out:
        quantizer.save(out)
        write_parquet(out / CODES_FILE, codes_table(emb, codes))
        write_json(out / QUANTIZER_REPORT_FILE, report)
    usage = report["usage"]
    table = markdown_table(
        ["level", "codewords", "used", "top share", "perplexity", "MSE with levels ≤ l"],
        [(u["level"], u["codewords"], u["used"], u["top_share"], u["perplexity"], m)
         for u, m in zip(usage, report["mse_per_level"])],
        {"used": ".2f", "top share": ".3f", "perplexity": ".1f", "MSE with levels ≤ l": ".5f"},
    )
    context.log.info(f"quantizer: mse per level {report['mse_per_level']}")
    return dg.MaterializeResult(metadata={
        "dagster/row_count": dg.MetadataValue.int(int(codes.shape[0])),
        "mse": dg.MetadataValue.float(report["mse_per_level"][-1]),
        "relative_mse": dg.MetadataValue.float(report["relative_mse"]),
        "mse_per_level": dg.MetadataValue.json(report["mse_per_level"]),
        "training_mse": dg.MetadataValue.json(report["history"]),
        "collapse_top_share": dg.MetadataValue.float(max(u["top_share"] for u in usage)),
        "levels": dg.MetadataValue.md(table),
        "code_usage": _usage_plot(usage, codes),
        "path": dg.MetadataValue.path(str(artifacts.catalogue.quantizer_dir(key))),
    })


@dg.asset(
    partitions_def=DAILY,
    deps=["bom_quantizer", "graph_snapshot", "entity_embeddings"],
    group_name="tokens",
    kinds={"parquet"},
    owners=["team:hir"],
    description=(
        "Bag of weighted nested tokens per entity (token = level·1e9 + the path of codes 1…level, so "
        "a fine token implies its coarse one): a user's own tokens plus its strongest interests; an "
        "ad's, campaign's, advertiser's or product's own tokens plus the interests it serves. One "
        "weighting for every kind: idf × BM25-like saturation, unit norm; retrieval adds the item "
        "log prior to overlap / τ; a query (`hir retrieve`, hir_bom) probes the HIR_BOM_QUERY_PROBES finest "
        "item tokens nearest its embedding. Metadata: recall of the own and query bags against the "
        "embedding's own top 100."
    ),
)
def bom_tokens(context: dg.AssetExecutionContext, artifacts: ArtifactStore, hir_settings: SettingsResource):
    import pyarrow.parquet as pq
    import torch
    from hir.evaluation.token_quality import dense_recall
    from hir.models.quantizer import token_ids
    from hir.storage import (
        SNAPSHOT_EDGES_FILE,
        SNAPSHOT_NODES_FILE,
        TOKENS_FILE,
        write_parquet,
    )
    from hir.tokens.bom import (
        bag_temperature,
        bags_table,
        build_bags,
        codes_setting,
        engagement_matrix,
        load_probe,
        log_prior,
        query_temperature,
        read_codes,
        read_embeddings,
    )

    settings = hir_settings.get()
    key = context.partition_key
    emb, codes = read_codes(_require(artifacts.catalogue.codes(key), "bom_quantizer"))
    vectors = read_embeddings(_require(artifacts.catalogue.embeddings(key), "entity_embeddings")).vectors
    graph = artifacts.catalogue.snapshot_dir(key)
    nodes = pq.read_table(_require(graph / SNAPSHOT_NODES_FILE, "graph_snapshot"), columns=["entity_id"])
    edges = pq.read_table(_require(graph / SNAPSHOT_EDGES_FILE, "graph_snapshot"), columns=["src", "dst", "weight"])
    engagement = engagement_matrix(emb, nodes, edges)
    tokens = token_ids(torch.from_numpy(codes), codes_setting(settings)).numpy()
    bags, token_of_column = build_bags(emb, tokens, engagement, settings)
    encoder_t = _encoder_temperature(artifacts, key)
    temperature = bag_temperature(vectors, bags, emb.entity_type, encoder_t)
    probes = settings.bom_query_probes
    probe = load_probe(artifacts.catalogue.quantizer_dir(key)) if probes > 0 else None
    query_t = None if probe is None else query_temperature(probe, vectors, emb.entity_type, bags, token_of_column, encoder_t, probes)
    prior = log_prior(emb, engagement)
    table = bags_table(emb, bags, token_of_column, cutoff_of(key), prior, temperature, query_t)
    with artifacts.write_partition("bom_tokens", key) as out:
        write_parquet(out / TOKENS_FILE, table)
    kept = dense_recall(vectors, bags, emb.entity_type, prior, temperature, encoder_t)
    query_kept = {} if probe is None else dense_recall(
        vectors, bags, emb.entity_type, prior, query_t, encoder_t,
        query=lambda rows, kind: probe.matrix(vectors[rows], "user", kind, probes, token_of_column))
    return dg.MaterializeResult(metadata={
        "dagster/row_count": dg.MetadataValue.int(table.num_rows),
        "tokens_per_bag": dg.MetadataValue.float(float(bags.nnz / max(table.num_rows, 1))),
        "distinct_tokens": dg.MetadataValue.int(int((bags.getnnz(axis=0) > 0).sum())),
        "bag_temperature": dg.MetadataValue.float(temperature),
        "recall_of_dense_top100": dg.MetadataValue.json(kept),
        **({} if query_t is None else {"query_temperature": dg.MetadataValue.float(query_t),
                                       "query_recall_of_dense_top100": dg.MetadataValue.json(query_kept)}),
        "own_token_usage": dg.MetadataValue.md(_token_usage(tokens)),
        "preview": dg.MetadataValue.md(_bag_preview(table)),
        "path": dg.MetadataValue.path(str(artifacts.path("bom_tokens", key))),
    })


def _encoder_temperature(artifacts: ArtifactStore, key: str) -> float:
    """The InfoNCE temperature of the partition's encoder; 1.0 when it has no checkpoint config."""
    from hir.models.checkpoint import read_configs

    try:
        return float(read_configs(artifacts.catalogue.encoder_dir(key))[0].nce_temperature)
    except FileNotFoundError:
        return 1.0


def _token_usage(tokens) -> str:
    """Per level of the entities' own nested tokens: distinct tokens, share on the most used one."""
    import numpy as np

    rows = []
    for level, column in enumerate(tokens.T, 1):
        _, counts = np.unique(column, return_counts=True)
        rows.append((level, counts.size, counts.max() / column.size, np.exp(-(counts / column.size * np.log(counts / column.size)).sum())))
    return markdown_table(["level", "tokens used", "top share", "perplexity"], rows, {"top share": ".3f", "perplexity": ".1f"})


def _bag_preview(table) -> str:
    rows = table.slice(0, PREVIEW_ROWS).to_pylist()
    cells = []
    for r in rows:
        bag = ", ".join(f"{t}({w:.2f})" for t, w in sorted(zip(r["tokens"], r["weights"]), key=lambda p: -p[1])[:6])
        cells.append((r["entity_id"], r["entity_type"], r["source_key"], bag))
    return markdown_table(["entity", "type", "key", "tokens (weight)"], cells)


@dg.asset(
    partitions_def=DAILY,
    deps=["bom_tokens"],
    group_name="tokens",
    kinds={"parquet", "pytorch"},
    owners=["team:hir"],
    description=(
        "Inverted index token → (entity, weight): Parquet postings sorted by token, loaded into "
        "compact CSR arrays (tokens, offsets, rows, weights) for weighted-overlap retrieval."
    ),
    check_specs=[dg.AssetCheckSpec("bag_tokens_indexed", asset="bom_index", blocking=True,
                                   description="every (token, entity) of every bag is a posting of the loaded index")],
)
def bom_index(context: dg.AssetExecutionContext, artifacts: ArtifactStore):
    import numpy as np
    import pyarrow.parquet as pq
    from hir.models.quantizer import TOKEN_LEVEL_STRIDE
    from hir.storage import POSTINGS_FILE, write_parquet
    from hir.tokens.bom import load_index, postings_table

    key = context.partition_key
    bags = pq.read_table(_require(artifacts.catalogue.tokens(key), "bom_tokens"))
    postings = postings_table(bags)
    with artifacts.write_partition("bom_index", key) as out:
        write_parquet(out / POSTINGS_FILE, postings)
    index = load_index(pq.read_table(artifacts.catalogue.postings(key)))
    lengths = (index.offsets[1:] - index.offsets[:-1]).numpy()
    levels = index.tokens.numpy() // TOKEN_LEVEL_STRIDE
    per_level = markdown_table(
        ["level", "tokens", "postings", "longest list"],
        [(lv, (levels == lv).sum(), lengths[levels == lv].sum(), lengths[levels == lv].max()) for lv in np.unique(levels)],
        {"postings": ",", "longest list": ","},
    )
    yield dg.MaterializeResult(metadata={
        "dagster/row_count": dg.MetadataValue.int(postings.num_rows),
        "tokens": dg.MetadataValue.int(int(index.tokens.numel())),
        "entities": dg.MetadataValue.int(index.num_entities),
        "levels": dg.MetadataValue.md(per_level),
        "path": dg.MetadataValue.path(str(artifacts.path("bom_index", key))),
    })
    missing = _unindexed(index, postings)
    yield dg.AssetCheckResult(check_name="bag_tokens_indexed", asset_key="bom_index", passed=missing == 0,
                              metadata={"missing_postings": missing, "postings": postings.num_rows})


def _unindexed(index, postings) -> int:
    """Bag (token, entity) pairs that the loaded index does not hold as postings.

    Each pair becomes one integer key ``token * span + entity``; a set test keeps this linear in
    the postings (gathering every query token's whole posting list would be quadratic).
    """
    import numpy as np
    import torch

    tokens = postings.column("token").to_numpy().astype(np.int64)
    entity = postings.column("entity_id").to_numpy().astype(np.int64)
    lengths = index.offsets[1:] - index.offsets[:-1]
    held_tokens = torch.repeat_interleave(index.tokens, lengths).numpy()
    held_entity = index.entity_ids[index.rows].numpy()
    span = int(max(entity.max(initial=0), held_entity.max(initial=0))) + 1
    found = np.isin(tokens * span + entity, held_tokens * span + held_entity)
    return int(tokens.size - found.sum())


@dg.asset(
    partitions_def=DAILY,
    deps=["bom_index", "content", "relations", "entities"],
    group_name="tokens",
    kinds={"parquet", "duckdb"},
    owners=["team:hir"],
    description=(
        "A readable description per token: top tf-idf terms of the content of its entities "
        "(against all content) and their most common categories/genres."
    ),
)
def token_descriptions(context: dg.AssetExecutionContext, artifacts: ArtifactStore, warehouse: Warehouse):
    import pyarrow.parquet as pq
    from hir.storage import (
        DESCRIPTIONS_FILE,
        DESCRIPTIONS_PREVIEW_FILE,
        write_bytes,
        write_parquet,
    )
    from hir.tokens.bom import describe_tokens

    key = context.partition_key
    cutoff = cutoff_of(key)
    postings = pq.read_table(_require(artifacts.catalogue.postings(key), "bom_index"))
    with warehouse.connect(read_only=True) as con:
        texts = con.execute(_TEXTS_SQL, [cutoff]).df()
        labels = con.execute(_LABELS_SQL, [cutoff, cutoff]).df()
    table = describe_tokens(postings, texts, labels)
    preview = _description_preview(table)
    with artifacts.write_partition("token_descriptions", key) as out:
        write_parquet(out / DESCRIPTIONS_FILE, table)
        write_bytes(out / DESCRIPTIONS_PREVIEW_FILE, preview.encode())
    described = sum(1 for d in table.column("description").to_pylist() if d)
    return dg.MaterializeResult(metadata={
        "dagster/row_count": dg.MetadataValue.int(table.num_rows),
        "described_tokens": dg.MetadataValue.int(described),
        "preview": dg.MetadataValue.md(preview),
        "path": dg.MetadataValue.path(str(artifacts.path("token_descriptions", key))),
    })


def _description_preview(table) -> str:
    """The most populated tokens of each level with their descriptions, as Markdown."""
    rows = sorted(table.to_pylist(), key=lambda r: (r["level"], -r["entities"]))
    cells = [(r["token"], level, r["entities"], r["description"] or "—")
             for level in sorted({r["level"] for r in rows})
             for r in [r for r in rows if r["level"] == level][:PREVIEW_ROWS]]
    return markdown_table(["token", "level", "entities", "description"], cells, {"entities": ","})
