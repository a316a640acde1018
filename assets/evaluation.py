"""Evaluation stage (DESIGN §10): baselines, retrieval, rankers, token quality and the report.

Partition ``D`` (cut-off ``T``): every scorer trains on events before ``T`` and is tested on the
target events of the test window (``eval_windows``), full ranking over every item of the target
type (:func:`hir.evaluation.data.partition_split`).

* ``baselines`` — the cheap baselines of ``HIR_EVAL_BASELINES`` (popularity, co-occurrence, ALS,
  text-only world knowledge; LightGCN when listed there).
* ``retrieval_eval`` — hir's scorers (embedding dot product, Bag-of-Meaning overlap) beside the
  baselines, and, when ``HIR_EVAL_BASELINES`` lists SASRec, the SASRec family over
  ``HIR_EVAL_SEEDS`` seeds (SASRec, hir_seq and its controls started from text vectors or ALS
  factors; :func:`hir.evaluation.scorers.sequence_family`, as ``hir eval`` runs it): Recall@K,
  NDCG@K, MRR, and the cold-start slice. hir's own scorer heads it, by rule.
* ``ranker_eval`` — click and conversion rankers with base features only and with hir features
  read point-in-time from Feast (:mod:`hir.evaluation.rankers`).
* ``token_quality`` — NMI with the planted interests (synthetic), category purity (relations),
  collapse (share of entities on the most used token).
* ``evaluation_report`` — one Markdown report with the tables and plots, in the asset's metadata
  and at ``<data home>/reports/evaluation_<D>.md``.
"""

import json

import dagster as dg
from hir.errors import SourceError
from hir.partitions import DAILY, cutoff_of
from hir.resources import ArtifactStore, SettingsResource, Warehouse
from hir.serving.feast_store import FeastStore
from hir.settings import Settings
from hir.tables import markdown_table

GROUP = "evaluation"
OWNERS = ["team:hir"]
KS = (1, 5, 10, 20, 50, 100)
WAREHOUSE_POOL = "duckdb_writer"  # readers take the writers' pool: DuckDB never meets a writer elsewhere


def _split(warehouse: Warehouse, partition: str, settings: Settings):
    from hir.evaluation.data import partition_split

    with warehouse.connect(read_only=True) as con:
        return partition_split(con, cutoff_of(partition), settings)


def _read_results(artifacts: ArtifactStore, asset: str, partition: str) -> dict:
    path = artifacts.catalogue.results(asset, partition)
    if not path.exists():
        raise SourceError(f"{asset} {partition} is missing at {path}; materialise it first")
    return json.loads(path.read_text(encoding="utf-8"))


def _write_results(artifacts: ArtifactStore, asset: str, partition: str, payload: dict, per_query: dict | None = None) -> None:
    """``results.json`` and, with ``per_query`` (:func:`~hir.evaluation.protocols.run_scorers`'), the
    scorers' figures on each test query beside it (``per_query.parquet``)."""
    from hir.evaluation.protocols import per_query_frame
    from hir.storage import PER_QUERY_FILE, RESULTS_FILE, write_json, write_parquet

    with artifacts.write_partition(asset, partition) as out:
        write_json(out / RESULTS_FILE, payload)
        if per_query is not None:
            write_parquet(out / PER_QUERY_FILE, per_query_frame(per_query))


def _read_per_query(artifacts: ArtifactStore, asset: str, partition: str) -> dict:
    """The per-query figures an evaluation asset stored (none from a materialisation before they were)."""
    import pandas as pd
    from hir.evaluation.protocols import per_query_of
    from hir.storage import PER_QUERY_FILE

    path = artifacts.catalogue.folder(asset, partition) / PER_QUERY_FILE
    return per_query_of(pd.read_parquet(path)) if path.exists() else {}


def _interval_table(paired: dict) -> str:
    """Markdown table of :func:`~hir.evaluation.protocols.paired_differences`: one row per comparison."""
    rows = [(name, *(x for m, value in figures.items() for x in (value, *paired["diff_ci"][name][m])))
            for name, figures in paired["diff"].items()]
    metrics = list(next(iter(paired["diff"].values()), {}))
    columns = [c for m in metrics for c in (m, f"{m} low", f"{m} high")]
    return markdown_table(["comparison", *columns], rows, dict.fromkeys(columns, "+.4f"),
                          empty="none: no baseline's per-query figures (materialise baselines again)")


def _metric_table(results: dict, columns=("recall@10", "recall@50", "ndcg@10", "mrr")) -> str:
    """Markdown table: one row per scorer, the given metric columns (``-`` where absent)."""
    rows = [(name, *(row.get(c) for c in columns)) for name, row in results.items()]
    return markdown_table(["scorer", *columns], rows, dict.fromkeys(columns, ".4f"))


def _cold_table(results: dict) -> str:
    cold = {n: r["cold_start"] for n, r in results.items() if isinstance(r.get("cold_start"), dict)}
    return _metric_table(cold) if cold else "no cold-start targets in the test window"


def _world_knowledge_vectors(artifacts: ArtifactStore, warehouse: Warehouse, split):
    """``[n_items, d]`` world_knowledge vectors of the split's items (zero rows where none), the
    text-only baseline's and ``sasrec_text``'s; ``None`` when no item has one."""
    import numpy as np
    import pyarrow.parquet as pq

    path = artifacts.catalogue.world_knowledge()
    if not path.exists():
        return None
    table = pq.read_table(path, columns=["entity_id", "vector"])
    if not table.num_rows:
        return None
    with warehouse.connect(read_only=True) as con:
        keys = dict(con.execute("SELECT entity_id, source_key FROM entities WHERE entity_type = ?",
                                [split.info["item_type"]]).fetchall())
    ids = table.column("entity_id").to_numpy()
    vectors = np.stack(table.column("vector").to_numpy(zero_copy_only=False)).astype(np.float32)
    slot = {str(keys[int(e)]): n for n, e in enumerate(ids) if int(e) in keys}
    items = np.zeros((len(split.item_keys), vectors.shape[1]), np.float32)
    for n, key in enumerate(split.item_keys):
        if str(key) in slot:
            items[n] = vectors[slot[str(key)]]
    return items if items.any() else None


@dg.asset(
    partitions_def=DAILY,
    deps=["graph_snapshot", "eval_windows", "world_knowledge", "events", "entities"],
    pool=WAREHOUSE_POOL,
    group_name=GROUP,
    kinds={"scikitlearn", "pytorch", "json"},
    owners=OWNERS,
    description=(
        "Baseline retrievers fitted on the events before the cut-off and scored on the test window "
        "(full ranking): time-decayed popularity, recency-weighted item co-occurrence, ALS, text-only "
        "world knowledge; LightGCN when HIR_EVAL_BASELINES lists it (SASRec runs in retrieval_eval)."
    ),
)
def baselines(context: dg.AssetExecutionContext, artifacts: ArtifactStore, warehouse: Warehouse, hir_settings: SettingsResource) -> dg.MaterializeResult:
    from hir.evaluation.protocols import run_scorers
    from hir.evaluation.scorers import baseline_factories
    from hir.models.baselines.text_world_knowledge import TextScorer

    settings = hir_settings.get()
    partition = context.partition_key
    split = _split(warehouse, partition, settings)
    names = [n.strip() for n in settings.eval_baselines.split(",") if n.strip()]
    max_epochs = settings.eval_max_epochs or None
    once = [n for n in names if n not in {"text_world_knowledge", "sasrec"}]
    factories, skipped = baseline_factories(split, settings, settings.seed, once, max_epochs)
    if "text_world_knowledge" in names:
        text = _world_knowledge_vectors(artifacts, warehouse, split)
        if text is None:
            skipped["text_world_knowledge"] = "no world knowledge vectors for the items"
        else:
            factories["text_world_knowledge"] = lambda: TextScorer(text)
    per_query = {}  # retrieval_eval pairs hir with each baseline on the same queries
    results = run_scorers(split, factories, KS, context.log.info, per_query) if len(split.test.users) else {}
    payload = {"results": results, "skipped": skipped, "protocol": split.info, "seed": settings.seed,
               "baselines": names, "max_epochs": max_epochs}
    _write_results(artifacts, "baselines", partition, payload, per_query)
    return dg.MaterializeResult(metadata={
        "dagster/row_count": dg.MetadataValue.int(len(results)),
        "test_queries": dg.MetadataValue.int(len(split.test.users)),
        "protocol": dg.MetadataValue.json(split.info),
        "skipped": dg.MetadataValue.json(skipped),
        "metrics": dg.MetadataValue.md(_metric_table(results)),
        "path": dg.MetadataValue.path(str(artifacts.catalogue.results("baselines", partition))),
    })


@dg.asset(
    partitions_def=DAILY,
    deps=["baselines", "entity_embeddings", "bom_index", "eval_windows"],
    pool=WAREHOUSE_POOL,
    group_name=GROUP,
    kinds={"pytorch", "json"},
    owners=OWNERS,
    description=(
        "Future-interaction retrieval on the test window, full ranking: hir (entity embedding cosine "
        "over the encoder's InfoNCE temperature plus the item's log prior; hir_recent, queried with "
        "the user's last items; the plain dot product as hir_no_prior; hir's top 200 re-ranked by the "
        "engagement head as hir_engagement; Bag-of-Meaning token overlap) "
        "beside every baseline of the same split; where HIR_EVAL_BASELINES lists SASRec, SASRec, SASRec started "
        "from hir's item embeddings (hir_seq) and its controls started from the text world-knowledge vectors "
        "(sasrec_text) or ALS factors (sasrec_als), over HIR_EVAL_SEEDS seeds (mean and std). "
        "Recall@K, NDCG@K, MRR, and the cold-start slice (targets unseen before the cut-off)."
    ),
)
def retrieval_eval(context: dg.AssetExecutionContext, artifacts: ArtifactStore, warehouse: Warehouse, hir_settings: SettingsResource) -> dg.MaterializeResult:
    from hir.evaluation.protocols import beating_every_baseline, paired_differences, run_scorers
    from hir.evaluation.scorers import (
        HEADLINE_RULE,
        HEADLINE_SCORER,
        compared_pairs,
        hir_factories,
        hir_item_table,
        run_sequence_family,
        seeds_of,
    )

    settings = hir_settings.get()
    partition = context.partition_key
    base = _read_results(artifacts, "baselines", partition)
    split = _split(warehouse, partition, settings)
    factories = hir_factories(split, artifacts.catalogue, partition, settings)
    if "hir" not in factories:
        raise SourceError(f"entity_embeddings {partition} is missing; materialise it first")
    per_query = _read_per_query(artifacts, "baselines", partition)
    hir = run_scorers(split, factories, KS, context.log.info, per_query) if len(split.test.users) else {}
    baseline_rows, skipped = dict(base["results"]), {}
    seeds = seeds_of(settings.seed, settings.eval_seeds)
    if "sasrec" in base["baselines"] and len(split.test.users):
        text = _world_knowledge_vectors(artifacts, warehouse, split)  # the text baseline's vectors
        hir_seq, family, skipped = run_sequence_family(
            split, settings, seeds, settings.eval_max_epochs or None, KS, hir_item_table(split, artifacts.catalogue, partition),
            None if text is None else lambda: text, context.log.info, per_query)
        hir, baseline_rows = hir | hir_seq, baseline_rows | family
    results = {**hir, **baseline_rows}
    paired = paired_differences(per_query, compared_pairs(hir, baseline_rows), seed=settings.seed)
    payload = {"results": results, "hir_scorers": sorted(hir), "headline": HEADLINE_SCORER, "headline_rule": HEADLINE_RULE,
               "protocol": split.info, "seed": settings.seed, "seeds": seeds, "skipped": skipped, **paired}
    _write_results(artifacts, "retrieval_eval", partition, payload)
    best = max(baseline_rows, key=lambda n: baseline_rows[n]["ndcg@10"]) if baseline_rows else None
    beating = beating_every_baseline(hir, baseline_rows)
    metadata = {
        "dagster/row_count": dg.MetadataValue.int(len(results)),
        "metrics": dg.MetadataValue.md(_metric_table(results)),
        "cold_start": dg.MetadataValue.md(_cold_table(results)),
        "recall_curves": _recall_plot(results),
        "best_baseline": dg.MetadataValue.text(best or "none"),
        "paired_intervals": dg.MetadataValue.md(_interval_table(paired)),
    }
    if hir:
        metadata["hir_recall@10"] = dg.MetadataValue.float(float(hir["hir"]["recall@10"]))
        metadata["hir_ndcg@10"] = dg.MetadataValue.float(float(hir["hir"]["ndcg@10"]))
        metadata["hir_beats_every_baseline"] = dg.MetadataValue.bool("hir" in beating)
        metadata["hir_scorers_beating_every_baseline"] = dg.MetadataValue.text(", ".join(beating) or "none")
    return dg.MaterializeResult(metadata=metadata)


def _recall_figure(results: dict):
    from hir.plots import figure

    fig, ax = figure(5.5, 3.4)
    for name, row in results.items():
        ks = [k for k in KS if f"recall@{k}" in row]
        ax.plot(ks, [row[f"recall@{k}"] for k in ks], marker="o", markersize=3, label=name)
    ax.set(xscale="log", xlabel="K", ylabel="Recall@K", title="recall curves (test window)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _recall_plot(results: dict) -> dg.MetadataValue:
    from hir.plots import png_markdown

    return png_markdown(_recall_figure(results), "recall curves")


@dg.asset(
    partitions_def=DAILY,
    deps=["feast_registry", "feature_tables", "eval_windows", "graph_snapshot"],
    pool=WAREHOUSE_POOL,
    group_name=GROUP,
    kinds={"scikitlearn", "feast", "json"},
    owners=OWNERS,
    description=(
        "Click and conversion rankers (HistGradientBoosting) trained on the validation window's "
        "exposures and tested on the test window, with base features only (counts, rates, recency "
        "before the cut-off) and with hir features read point-in-time from Feast: AUC, log-loss, "
        "normalised entropy and the lift."
    ),
)
def ranker_eval(context: dg.AssetExecutionContext, artifacts: ArtifactStore, warehouse: Warehouse,
                feast: FeastStore, hir_settings: SettingsResource) -> dg.MaterializeResult:
    from hir.evaluation import funnel as deep_funnel
    from hir.evaluation.rankers import evaluate_rankers, feast_lookup, ranker_events
    from hir.graph.snapshot import window_bounds
    from hir.plots import png_markdown
    from hir.storage import RESULTS_FILE, Artifacts, write_json, write_parquet

    settings = hir_settings.get()
    partition = context.partition_key
    bounds = window_bounds(cutoff_of(partition), settings)
    with warehouse.connect(read_only=True) as con:
        events = ranker_events(con, bounds["test_end"])
    types = [t for t in Artifacts(feast.artifacts_dir).feature_table_types(partition) if t != "user"]
    seconds = {k: v.timestamp() for k, v in bounds.items()}
    results = evaluate_rankers(events, seconds, feast_lookup(feast, types), settings.seed)

    def write_funnel_tables(writer) -> None:
        with artifacts.write_partition(deep_funnel.FEATURE_ASSET, partition) as out:
            writer(out)

    funnel, scores = deep_funnel.evaluate_partition(events, seconds, deep_funnel.parse_stages(settings.funnel_stages),
                                                    feast, write_funnel_tables, settings)
    payload = {"results": results, "funnel": funnel, "windows": {k: v.isoformat() for k, v in bounds.items()},
               "seed": settings.seed, "features": "hir, base and control: Feast point-in-time (FeastStore.training_set)"}
    with artifacts.write_partition("ranker_eval", partition) as out:
        write_json(out / RESULTS_FILE, payload)
        if scores is not None:
            write_parquet(out / deep_funnel.SCORES_FILE, scores)
    for name, row in results.items():
        context.log.info(f"{name}: {json.dumps(row)}")
    metadata = {
        "dagster/row_count": dg.MetadataValue.int(sum(r.get("test_examples", 0) for r in results.values())),
        "rankers": dg.MetadataValue.md(_ranker_table(results)),
        "funnel": dg.MetadataValue.md(deep_funnel.funnel_table(funnel)),
        "path": dg.MetadataValue.path(str(artifacts.catalogue.results("ranker_eval", partition))),
    }
    if funnel.get("status") == "ok":
        metadata["funnel_lift_per_slice"] = png_markdown(deep_funnel.lift_figure(funnel), "hir's AUC lift per slice")
    return dg.MaterializeResult(metadata=metadata)


def _ranker_table(results: dict) -> str:
    rows = []
    for name, row in results.items():
        if row.get("status") != "ok":
            rows.append((name, "-", f"not applicable: {row.get('reason', '')}", "", "", ""))
            continue
        counts = f"{row['train_examples']} ({row['train_positives']}) / {row['test_examples']} ({row['test_positives']})"
        for label, key in (("base", "base"), ("base + hir", "with_hir")):
            m = row[key]
            rows.append((name, label, m["auc"], m["logloss"], m["ne"], counts))
        rows.append((name, "lift", f"{row['lift']['auc']:+.2%}", "", f"{row['lift']['ne']:+.2%} (NE gain)", ""))
    return markdown_table(["task", "features", "AUC", "log-loss", "NE", "train / test examples (positives)"], rows,
                          {"AUC": ".4f", "log-loss": ".4f", "NE": ".4f"})


@dg.asset(
    partitions_def=DAILY,
    deps=["entity_embeddings", "bom_quantizer", "bom_index", "relations", "entities"],
    pool=WAREHOUSE_POOL,
    group_name=GROUP,
    kinds={"scikitlearn", "json"},
    owners=OWNERS,
    description=(
        "Token quality: NMI of coarse/fine prototypes and BoM codes with the planted interests "
        "(synthetic), purity against categories/genres from relations (real data), collapse "
        "(share of entities on the most used token), and the planted coarse-interest agreement of "
        "users' top-20 ads retrieved from the BoM index (synthetic)."
    ),
)
def token_quality(context: dg.AssetExecutionContext, artifacts: ArtifactStore, warehouse: Warehouse, hir_settings: SettingsResource) -> dg.MaterializeResult:
    from hir.evaluation.token_quality import token_quality_figures
    from hir.tokens.bom import load_store

    settings = hir_settings.get()
    partition = context.partition_key
    store = load_store(settings, partition, with_vectors=False)
    payload = token_quality_figures(warehouse, artifacts.catalogue.embeddings(partition),
                                    artifacts.catalogue.codes(partition), store, settings.seed)
    _write_results(artifacts, "token_quality", partition, payload)
    metadata = {
        "dagster/row_count": dg.MetadataValue.int(payload["entities"]),
        "token_quality": dg.MetadataValue.md(_quality_table(payload)),
        "cluster_sizes": _sizes_plot(payload),
    }
    if payload["planted_retrieval"]:
        metadata["planted_retrieval"] = dg.MetadataValue.json(payload["planted_retrieval"])
    return dg.MaterializeResult(metadata=metadata)


def _quality_table(payload: dict) -> str:
    scores = ["collapse (top share)", "NMI planted coarse", "NMI planted fine", "category purity"]
    rows = [(name, row["top_share"], row["used"], row.get("nmi_coarse"), row.get("nmi_fine"), row.get("purity"))
            for name, row in payload["groupings"].items()]
    table = markdown_table(["grouping", scores[0], "used", *scores[1:]], rows, dict.fromkeys(scores, ".4f"))
    planted = payload.get("planted_retrieval")
    if planted:
        table += (f"\n\nPlanted coarse-interest agreement of {planted['users']} users' top-{planted['k']} ads "
                  f"(BoM index): {planted['agreement']:.4f} (chance {planted['chance']:.4f}).")
    return table


def _sizes_figure(payload: dict):
    import numpy as np
    from hir.plots import figure

    groupings = list(payload["groupings"].items())
    fig, axes = figure(3.2 * max(len(groupings), 1), 3.0, ncols=max(len(groupings), 1))
    for ax, (name, row) in zip(np.atleast_1d(axes), groupings):
        ax.bar(np.arange(len(row["sizes"])), row["sizes"])
        ax.set(title=name, xlabel="cluster (largest first)", ylabel="entities", yscale="log")
    fig.tight_layout()
    return fig


def _sizes_plot(payload: dict) -> dg.MetadataValue:
    from hir.plots import png_markdown

    return png_markdown(_sizes_figure(payload), "cluster sizes")


@dg.asset(
    partitions_def=DAILY,
    deps=["baselines", "retrieval_eval", "ranker_eval", "token_quality", "entity_embeddings"],
    group_name=GROUP,
    kinds={"markdown"},
    owners=OWNERS,
    description=(
        "One Markdown report of the partition's evaluation: retrieval (all scorers, cold start), "
        "rankers, token quality, settings and seed, with recall curves, cluster sizes and a 2-D map "
        "of the embedding space; written to <data home>/reports/evaluation_<D>.md."
    ),
)
def evaluation_report(context: dg.AssetExecutionContext, artifacts: ArtifactStore, hir_settings: SettingsResource) -> dg.MaterializeResult:
    from hir.evaluation.funnel import funnel_table, lift_figure
    from hir.evaluation.report import build_report
    from hir.storage import write_bytes

    settings = hir_settings.get()
    partition = context.partition_key
    retrieval = _read_results(artifacts, "retrieval_eval", partition)
    rankers = _read_results(artifacts, "ranker_eval", partition)
    quality = _read_results(artifacts, "token_quality", partition)
    baseline_run = _read_results(artifacts, "baselines", partition)
    figures = {"recall curves": _recall_figure(retrieval["results"]), "cluster sizes": _sizes_figure(quality),
               "embedding map": _map_figure(artifacts.catalogue.embeddings(partition))}
    if rankers.get("funnel", {}).get("status") == "ok":
        figures["funnel lift per slice"] = lift_figure(rankers["funnel"])
    sections = {
        "Retrieval (test window, full ranking)": _metric_table(retrieval["results"]),
        "Paired differences with 95 % bootstrap intervals over the test queries": _interval_table(
            {"diff": retrieval.get("diff", {}), "diff_ci": retrieval.get("diff_ci", {})}),
        "Cold start (targets unseen before the cut-off)": _cold_table(retrieval["results"]),
        "Rankers (validation window → test window)": _ranker_table(rankers["results"]),
        "Deep funnel: conversion ranker, base / base + hir / base + control (Feast point-in-time)": funnel_table(rankers.get("funnel", {})),
        "Token quality": _quality_table(quality),
    }
    run = {"partition": partition, "cutoff": cutoff_of(partition).isoformat(), "seed": settings.seed,
           "seeds": retrieval.get("seeds"), "headline": retrieval.get("headline"), "headline_rule": retrieval.get("headline_rule"),
           "protocol": retrieval["protocol"], "baselines": baseline_run["baselines"],
           "skipped": baseline_run["skipped"] | retrieval.get("skipped", {}), "settings": _run_settings(settings)}
    text = build_report(f"hir evaluation — {settings.source}, partition {partition}", sections, figures, run)
    path = settings.data_home / "reports" / f"evaluation_{partition}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(path, text.encode("utf-8"))
    return dg.MaterializeResult(metadata={
        "report": dg.MetadataValue.md(text),
        "path": dg.MetadataValue.path(str(path)),
        "dagster/row_count": dg.MetadataValue.int(len(retrieval["results"])),
    })


def _run_settings(settings: Settings) -> dict:
    names = ("source", "threads", "val_days", "test_days", "train_steps", "train_batch", "train_dim", "train_layers",
             "train_coarse", "train_fine", "bom_codes", "synthetic_events", "eval_baselines", "eval_max_epochs", "eval_seeds")
    return {n: getattr(settings, n) for n in names}


def _map_figure(path):
    """2-D PCA map of (at most 5,000) embeddings coloured by coarse prototype."""
    import numpy as np
    import pyarrow.parquet as pq
    from hir.plots import figure

    table = pq.read_table(path, columns=["embedding", "coarse_prototype"])
    vectors = np.stack(table.column("embedding").to_numpy(zero_copy_only=False)).astype(np.float32)
    coarse = table.column("coarse_prototype").to_numpy()
    pick = np.random.default_rng(0).choice(len(vectors), size=min(5000, len(vectors)), replace=False)
    x = vectors[pick] - vectors[pick].mean(0)
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    xy = x @ vt[:2].T
    fig, ax = figure(5, 4)
    ax.scatter(xy[:, 0], xy[:, 1], c=coarse[pick], s=3, cmap="tab20")
    ax.set(title="embedding map (PCA), colour = coarse interest", xlabel="PC 1", ylabel="PC 2")
    fig.tight_layout()
    return fig
