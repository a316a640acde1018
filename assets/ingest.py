"""Ingest: read the configured source into the canonical warehouse tables (DESIGN §3, §4).

One multi-asset writes ``entities``, ``events``, ``relations``, ``content`` and ``rejected_rows``
in one transaction per input; an asset check proves every input row is accounted for.
"""


import dagster as dg
from hir.errors import SourceError
from hir.resources import SettingsResource, Warehouse
from hir.tables import markdown_table

INGEST_TABLES = ("entities", "events", "relations", "content", "rejected_rows")
_DESCRIPTIONS = {
    "entities": "Every entity (user, ad, campaign, advertiser, product, category, brand, …) with a dense id.",
    "events": "Interactions: impression, click, conversion, view, cart, fav, purchase, rating, tag …",
    "relations": "Structure: ad→campaign→advertiser, ad→product, product→brand, product→category …",
    "content": "Text and image references per entity: the world-knowledge input.",
    "rejected_rows": "Input rows that could not be used, with their location and reason.",
}


class IngestConfig(dg.Config):
    """Which source to read; empty values fall back to the ``HIR_SOURCE`` / ``HIR_SOURCE_PATH`` settings."""

    source: str = ""
    paths: list[str] = []


@dg.multi_asset(
    specs=[
        dg.AssetSpec(
            name,
            group_name="ingest",
            description=_DESCRIPTIONS[name],
            kinds={"duckdb"},
            owners=["team:hir"],
        )
        for name in INGEST_TABLES
    ],
    check_specs=[
        dg.AssetCheckSpec("rows_accounted", asset="rejected_rows", blocking=True,
                          description="accepted + rejected = read for every input of this run"),
    ],
    pool="duckdb_writer",
)
def ingest(context: dg.AssetExecutionContext, config: IngestConfig, warehouse: Warehouse, hir_settings: SettingsResource):
    from hir.graph.sources import read_source
    from hir.graph.warehouse import load_batch, table_counts

    settings = hir_settings.get()
    kind = config.source or settings.source
    paths = config.paths or [settings.source_path]
    reports = []
    for path in paths:
        context.log.info(f"reading {kind} {path or '(generated)'}")
        try:
            batch = read_source(kind, path or None, settings)
            with warehouse.connect() as con:
                reports.append(load_batch(con, batch))
        except SourceError as exc:
            # A user mistake: retrying cannot help, so fail at once with the one-line reason.
            raise dg.Failure(description=str(exc), allow_retries=False) from exc
        context.log.info(f"{kind}: {reports[-1]}")
    with warehouse.connect(read_only=True) as con:
        counts = table_counts(con)
        reasons = con.execute(
            "SELECT reason, count(*) AS n FROM rejected_rows GROUP BY reason ORDER BY n DESC LIMIT 10"
        ).fetchall()

    read = sum(r.rows_read for r in reports)
    accepted = sum(r.rows_accepted for r in reports)
    rejected = sum(r.rows_rejected for r in reports)
    new_rows = {
        "entities": sum(r.new_entities for r in reports),
        "events": sum(r.new_events for r in reports),
        "relations": sum(r.new_relations for r in reports),
        "content": sum(r.content_rows for r in reports),
        "rejected_rows": 0 if all(r.skipped for r in reports) else rejected,
    }
    for name in INGEST_TABLES:
        metadata = {
            "dagster/row_count": dg.MetadataValue.int(counts[name]),
            "new_rows": dg.MetadataValue.int(new_rows[name]),
            "source": dg.MetadataValue.text(kind),
        }
        if name == "rejected_rows":
            metadata["rows_read"] = dg.MetadataValue.int(read)
            metadata["rows_accepted"] = dg.MetadataValue.int(accepted)
            metadata["already_loaded_inputs"] = dg.MetadataValue.int(sum(r.skipped for r in reports))
            metadata["reasons"] = dg.MetadataValue.md(markdown_table(["reason", "rows"], reasons, empty="no rejected rows"))
        yield dg.MaterializeResult(asset_key=name, metadata=metadata)
    yield dg.AssetCheckResult(
        check_name="rows_accounted",
        asset_key="rejected_rows",
        passed=accepted + rejected == read,
        metadata={"read": read, "accepted": accepted, "rejected": rejected},
    )
