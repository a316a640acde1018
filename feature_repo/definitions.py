"""The hir Feast definitions: one entity, file source and feature view per entity type, and ``ranker_v1``.

For each entity type ``T`` (the built-in types of ``hir.serving.feast_store.BUILTIN_ENTITY_TYPES`` and any
other type the ``feature_tables`` asset has written):

- entity ``T`` with join key ``T_key`` (the source's own key string, what callers know);
- file source ``T_source`` over ``<data home>/artifacts/feature_tables/*/T.parquet`` (one Parquet
  file per daily partition), event timestamp ``cutoff`` (the snapshot's cut-off);
- feature view ``T_features``: ``entity_id`` (Int64), ``hir_embedding`` (Array(Float32)),
  ``bom_tokens`` (Array(Int64)), ``bom_weights`` (Array(Float32)), ``coarse_interest``,
  ``fine_interest`` (Int64), ``model_version`` (String);

and the feature service ``ranker_v1`` (user and ad views: what a click/conversion ranker reads).
The objects are built by ``hir.serving.feast_store.feast_objects`` so the platform applies exactly what
``feast apply`` would; this module only binds them to module names, where Feast's CLI finds them.
"""

from hir.serving.feast_store import feast_objects
from hir.settings import Settings

globals().update(feast_objects(Settings.from_env().artifacts_dir))
