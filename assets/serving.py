"""Serving (DESIGN §9): feature tables for Feast, the Feast registry and the online store.

``feature_tables`` splits a partition's entity embeddings (with their BoM tokens) into one Parquet
table per entity type, timestamped at the partition's cut-off; blocking checks guard the hand-over
to Feast (finite vectors, the right dimension, one row per entity and cut-off). ``feast_registry``
applies the repository; ``feast_online`` materialises the partition into the online store (SQLite
by default, Redis or Postgres per the ``online_store`` setting) and reads it back through Feast.
"""

from pathlib import Path

import dagster as dg
from hir.partitions import DAILY, cutoff_of
from hir.resources import ArtifactStore
from hir.serving.feast_store import (
    FeastStore,
    check_feature_table,
    join_key,
)
from hir.storage import Artifacts
from hir.tables import markdown_table

CHECKS = {
    "finite_vectors": ("nonfinite_rows", "every embedding holds finite numbers only"),
    "embedding_dim": ("wrong_dim_rows", "every embedding has the dimension of the partition's model"),
    "one_row_per_entity": ("duplicate_rows", "one row per entity and cut-off in every table"),
}


@dg.asset(
    deps=["entity_embeddings", "bom_tokens"],
    partitions_def=DAILY,
    group_name="serving",
    kinds={"parquet", "feast"},
    owners=["team:hir"],
    description="Feast offline source: one Parquet table per entity type and partition "
                "(<type>_key, entity_id, hir_embedding, bom_tokens, bom_weights, coarse/fine interest, "
                "model_version, cutoff). Tokens are empty lists until bom_tokens exists for the partition.",
    check_specs=[dg.AssetCheckSpec(name, asset="feature_tables", blocking=True, description=text)
                 for name, (_, text) in CHECKS.items()],
)
def feature_tables(context: dg.AssetExecutionContext, artifacts: ArtifactStore):
    from hir.serving.feast_store import write_feature_tables

    partition = context.partition_key
    cutoff = cutoff_of(partition)
    embeddings = artifacts.catalogue.embeddings(partition)
    tokens = artifacts.catalogue.tokens(partition)
    if not embeddings.exists():
        raise dg.Failure(f"feature_tables: {embeddings} is missing; materialise entity_embeddings for {partition} first")
    if not tokens.exists():
        context.log.warning(f"{tokens} is missing: bom_tokens columns are empty lists for {partition}")
    try:
        with artifacts.write_partition("feature_tables", partition) as out:
            stats = write_feature_tables(embeddings, tokens, cutoff, out)
    except ValueError as exc:
        raise dg.Failure(f"feature_tables: {exc}") from None
    folder = artifacts.path("feature_tables", partition)
    counts = {t: check_feature_table(artifacts.catalogue.feature_table(partition, t), s["dim"]) for t, s in stats.items()}
    yield dg.MaterializeResult(metadata=_tables_metadata(stats, folder, cutoff, tokens.exists()))
    for name, (column, _) in CHECKS.items():
        bad = {t: c[column] for t, c in counts.items() if c[column]}
        yield dg.AssetCheckResult(check_name=name, passed=not bad, metadata={"bad_rows_by_type": dg.MetadataValue.json(bad)})


def _tables_metadata(stats: dict, folder: Path, cutoff, tokens_present: bool) -> dict:
    rows = [(t, s["rows"], s["dim"], s["with_tokens"]) for t, s in sorted(stats.items())]
    return {
        "dagster/row_count": dg.MetadataValue.int(sum(s["rows"] for s in stats.values())),
        "cutoff": dg.MetadataValue.text(cutoff.isoformat()),
        "folder": dg.MetadataValue.path(str(folder)),
        "tokens_present": dg.MetadataValue.bool(tokens_present),
        "tables": dg.MetadataValue.md(markdown_table(["type", "rows", "dim", "with tokens"], rows)),
    }


@dg.asset(
    deps=["feature_tables"],
    partitions_def=DAILY,
    group_name="serving",
    kinds={"feast"},
    owners=["team:hir"],
    description="The Feast registry: an entity, file source and feature view per entity type and the "
                "ranker_v1 feature service, applied from feature_repo/ (feast apply).",
)
def feast_registry(context: dg.AssetExecutionContext, feast: FeastStore) -> dg.MaterializeResult:
    kinds = feast.apply()
    views = [(v, f"{v.removesuffix('_features')}_key") for v in sorted(kinds.get("FeatureView", []))]
    return dg.MaterializeResult(metadata={
        "registry": dg.MetadataValue.path(str(feast.repo_config().registry.path)),
        "feature_views": dg.MetadataValue.int(len(kinds.get("FeatureView", []))),
        "feature_services": dg.MetadataValue.text(", ".join(kinds.get("FeatureService", []))),
        "views": dg.MetadataValue.md(markdown_table(["feature view", "join key"], views)),
    })


@dg.asset(
    deps=["feast_registry", "feature_tables"],
    partitions_def=DAILY,
    group_name="serving",
    kinds={"feast"},
    owners=["team:hir"],
    description="The Feast online store after materialising this partition: for each entity the "
                "newest row with cut-off in [this cut-off, newest cut-off written], so re-materialising "
                "an older partition never replaces newer vectors.",
    check_specs=[dg.AssetCheckSpec("online_matches_tables", asset="feast_online",
                                   description="sampled online vectors equal the newest feature table's")],
)
def feast_online(context: dg.AssetExecutionContext, feast: FeastStore):
    partition = context.partition_key
    catalogue = Artifacts(feast.artifacts_dir)
    newest = catalogue.partitions("feature_tables")[-1]
    start, end = cutoff_of(partition), max(cutoff_of(partition), cutoff_of(newest))
    types = catalogue.feature_table_types(partition)
    store = feast.store()
    context.log.info(f"materialising {', '.join(types)} over [{start.isoformat()}, {end.isoformat()}]")
    feast.materialize(start, end, types, store)
    reader = feast.reader(store)
    online = _online_rows(feast, reader, types, partition)
    preview = _preview(feast, reader, types, partition) if types else "no feature tables"
    yield dg.MaterializeResult(metadata={
        "dagster/row_count": dg.MetadataValue.int(sum(online.values())),
        "online_store": dg.MetadataValue.text(feast.online_target),
        "window": dg.MetadataValue.text(f"[{start.isoformat()}, {end.isoformat()}]"),
        "entities_online": dg.MetadataValue.json(online),
        "preview": dg.MetadataValue.md(preview),
    })
    mismatches = {t: _mismatches(feast, reader, t, newest) for t in types}
    yield dg.AssetCheckResult(check_name="online_matches_tables", passed=not any(mismatches.values()),
                              metadata={"mismatched_keys_by_type": dg.MetadataValue.json(mismatches),
                                        "compared_with_partition": dg.MetadataValue.text(newest)})


def _mismatches(feast: FeastStore, reader, entity_type: str, partition: str, sample: int = 20) -> int:
    """Keys among the first ``sample`` of a type whose online embedding differs from ``partition``'s table."""
    import numpy as np
    import pyarrow.parquet as pq

    path = Artifacts(feast.artifacts_dir).feature_table(partition, entity_type)
    if not path.exists():
        return 0
    table = pq.read_table(path, columns=[f"{entity_type}_key", "hir_embedding"]).slice(0, sample)
    got = feast.online(entity_type, table.column(0).to_pylist(), features=["hir_embedding"], reader=reader)
    return sum(g is None or not np.array_equal(np.asarray(g, np.float32), np.asarray(w, np.float32))
               for g, w in zip(got["hir_embedding"], table.column(1).to_pylist()))


def _online_rows(feast: FeastStore, reader, types: list[str], partition: str) -> dict[str, int]:
    """Entities per type of this partition's feature tables that the online store holds, read through
    Feast so that it counts the same way for every online store."""
    import pyarrow.parquet as pq

    catalogue = Artifacts(feast.artifacts_dir)
    out = {}
    for t in types:
        keys = pq.read_table(catalogue.feature_table(partition, t), columns=[join_key(t)]).column(0).to_pylist()
        out[t] = sum(v is not None for v in reader.read(t, keys, ["entity_id"])["entity_id"])
    return out


def _preview(feast: FeastStore, reader, types: list[str], partition: str) -> str:
    """A Markdown table of the online features of the first three keys of the first type."""
    import pyarrow.parquet as pq

    t = types[0]
    path = Artifacts(feast.artifacts_dir).feature_table(partition, t)
    keys = pq.read_table(path, columns=[f"{t}_key"]).column(0).to_pylist()[:3]
    got = feast.online(t, keys, reader=reader)
    rows = []
    for i, key in enumerate(keys):
        vec = got["hir_embedding"][i] or []
        rows.append((key, got["model_version"][i], got["coarse_interest"][i], got["fine_interest"][i],
                     got["bom_tokens"][i], [round(x, 3) for x in vec[:4]]))
    return markdown_table([f"{t}_key", "model_version", "coarse", "fine", "tokens", "embedding[:4]"], rows)
