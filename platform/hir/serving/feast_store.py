"""The Feast feature store (DESIGN §9): feature-table layout, Feast objects, and the ``FeastStore`` resource.

Layout. The ``feature_tables`` asset writes, per daily partition ``D`` with cut-off ``T``, one
Parquet file per entity type: ``<artifacts>/feature_tables/D/<type>.parquet`` with columns
``<type>_key`` (the source key), ``entity_id``, the feature columns of :data:`FEATURES` and
``cutoff`` = ``T`` (the event timestamp). Each type's Feast file source reads the glob
``feature_tables/[0-9]*/<type>.parquet``: every partition, never the hidden scratch folders of a
partition being written. Re-materialising a partition replaces its folder, so there is always one
row per entity and cut-off.

Point in time. A row with cut-off ``T`` was computed from data strictly before ``T``; a historical
query for an entity at event time ``t`` gets the row with the greatest ``T <= t``.

Repository. ``feature_repo/feature_store.yaml`` names its paths through ``${HIR_DATA_HOME}``; the
resource substitutes its own resolved data home, so it works from any working directory without
relying on the environment, and replaces the SQLite online store with the server the
``online_store`` / ``online_url`` settings name (:func:`online_store_config`).
``feature_repo/definitions.py`` binds :func:`feast_objects` to module names for the Feast CLI; the
resource applies the same objects.

Online reads. In process every read (``hir lookup``, the ``feast_online`` check, the benchmarks)
goes through :class:`OnlineReader`: the online store's own ``online_read``, the call Feast's
``get_online_features`` makes for each view, so it works the same for SQLite, Redis and Postgres;
other processes read through Feast's feature server (``hir serve``) over the same store.
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
import urllib.parse
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Sequence

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from hir.errors import SettingsError
from hir.settings import Settings
from hir.storage import FEATURE_TABLE_FILE, Artifacts, write_parquet

REPO_DIR = Path(__file__).resolve().parents[3] / "feature_repo"
TIMESTAMP_FIELD = "cutoff"
RANKER_SERVICE = "ranker_v1"
RANKER_TYPES = ("user", "ad")
# Entity types defined even before any data of theirs exists (every built-in source's types).
BUILTIN_ENTITY_TYPES = (
    "user", "ad", "campaign", "advertiser", "product", "category", "brand", "movie", "genre", "tag", "pixel",
)
# Feature columns of every feature view, in order, with their Arrow types.
FEATURES = {
    "entity_id": pa.int64(),
    "hir_embedding": pa.list_(pa.float32()),
    "bom_tokens": pa.list_(pa.int64()),
    "bom_weights": pa.list_(pa.float32()),
    "coarse_interest": pa.int64(),
    "fine_interest": pa.int64(),
    "model_version": pa.string(),
}
_TYPE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
ONLINE_STORES = ("sqlite", "redis", "postgres")


def type_name(entity_type: str) -> str:
    """The Feast name of an entity type: lower case, other characters than ``[a-z0-9_]`` → ``_``.

    Raises ``SettingsError`` when no usable name remains (e.g. an empty type or a leading digit).
    """
    name = re.sub(r"[^a-z0-9_]", "_", str(entity_type).strip().lower())
    if not _TYPE_NAME.match(name):
        raise SettingsError(f"entity type {entity_type!r} cannot name a Feast entity (need [a-z][a-z0-9_]*)")
    return name


def join_key(entity_type: str) -> str:
    """The join key column of a type: ``<type>_key``, holding the source key string."""
    return f"{entity_type}_key"


def view_name(entity_type: str) -> str:
    return f"{entity_type}_features"


def feast_objects(artifacts_dir: Path) -> dict[str, Any]:
    """Every Feast object of the repository, by module name (see ``feature_repo/definitions.py``).

    ``artifacts_dir`` is the platform's artefact folder; the types are the built-in ones and every
    type with a feature table there.
    """
    import feast
    from feast.data_format import ParquetFormat
    from feast.types import Array, Float32, Int64, String

    dtypes = {"entity_id": Int64, "hir_embedding": Array(Float32), "bom_tokens": Array(Int64),
              "bom_weights": Array(Float32), "coarse_interest": Int64, "fine_interest": Int64,
              "model_version": String}
    objects: dict[str, Any] = {}
    catalogue = Artifacts(artifacts_dir)
    for t in sorted(set(BUILTIN_ENTITY_TYPES) | set(catalogue.feature_table_types())):
        entity = feast.Entity(name=t, join_keys=[join_key(t)], value_type=feast.ValueType.STRING,
                              description=f"a {t}, keyed by its source key")
        source = feast.FileSource(name=f"{t}_source", path=catalogue.feature_table_glob(t),
                                  file_format=ParquetFormat(), timestamp_field=TIMESTAMP_FIELD,
                                  description=f"feature_tables partitions of type {t}")
        view = feast.FeatureView(
            name=view_name(t), entities=[entity], source=source, online=True,
            schema=[feast.Field(name=join_key(t), dtype=String)]
            + [feast.Field(name=n, dtype=dtypes[n]) for n in FEATURES],
            description=f"hir embedding, BoM tokens and interests of each {t} at each snapshot cut-off",
            tags={"owner": "hir"},
        )
        objects.update({f"{t}_entity": entity, f"{t}_source": source, view_name(t): view})
    objects[RANKER_SERVICE] = feast.FeatureService(
        name=RANKER_SERVICE, features=[objects[view_name(t)] for t in RANKER_TYPES],
        description="features a click/conversion ranker reads for a (user, ad) pair", tags={"version": "1"},
    )
    return objects


def online_store_config(kind: str, url: str) -> dict[str, Any] | None:
    """The ``online_store`` block of ``feature_store.yaml`` for the ``online_store`` and ``online_url`` settings.

    None for ``sqlite`` (the repository's own block: a file under the data home). ``redis`` takes
    ``redis://[:password@]host[:port][/db]`` (``rediss://`` for TLS; a password must not hold a
    comma, Feast's separator); ``postgres`` takes ``postgresql://user[:password]@host[:port]/database``
    with an optional ``?sslmode=`` (Feast's default: require). Raises ``SettingsError`` for another
    kind or a URL that does not fit.
    """
    if kind == "sqlite":
        return None
    if kind not in ONLINE_STORES:
        raise SettingsError(f"HIR_ONLINE_STORE={kind!r}: expected one of {', '.join(ONLINE_STORES)}")
    parts = urllib.parse.urlsplit(url)
    schemes = {"redis": ("redis", "rediss"), "postgres": ("postgresql", "postgres")}[kind]
    if parts.scheme not in schemes or not parts.hostname:
        raise SettingsError(f"HIR_ONLINE_URL={url!r}: a {kind} store needs a {schemes[0]}://host… URL")
    password = urllib.parse.unquote(parts.password or "")
    if kind == "redis":
        db = parts.path.strip("/") or "0"
        params = [f"{parts.hostname}:{parts.port or 6379}", f"db={db}", f"ssl={str(parts.scheme == 'rediss').lower()}"]
        return {"type": "redis", "connection_string": ",".join(params + ([f"password={password}"] if password else []))}
    database = parts.path.strip("/")
    if not database or not parts.username:
        raise SettingsError(f"HIR_ONLINE_URL={url!r}: a postgres store needs postgresql://user@host/database")
    block = {"type": "postgres", "host": parts.hostname, "port": parts.port or 5432, "database": database,
             "user": urllib.parse.unquote(parts.username), "password": password}
    sslmode = urllib.parse.parse_qs(parts.query).get("sslmode")
    return block | ({"sslmode": sslmode[0]} if sslmode else {})


def write_feature_tables(embeddings_path: Path, tokens_path: Path | None, cutoff: datetime,
                         out_dir: Path) -> dict[str, dict[str, Any]]:
    """Split one partition's embeddings (joined with its BoM tokens) into one table per entity type.

    Args:
        embeddings_path: ``entity_embeddings/<D>/embeddings.parquet`` (contract in HELPERS.md).
        tokens_path: ``bom_tokens/<D>/tokens.parquet``, or None / a missing file: empty token lists.
        cutoff: the partition's cut-off; every embedding row must carry exactly this cut-off.
        out_dir: folder receiving ``<type>.parquet`` (the partition's scratch folder).

    Returns ``{type: {"rows", "dim", "with_tokens"}}``. Raises ``ValueError`` naming the file and
    the reason when the embeddings break the contract.
    """
    emb = pq.read_table(embeddings_path)
    dim = _embedding_dim(emb, embeddings_path)
    stamps = pc.cast(emb.column("cutoff"), pa.timestamp("us", tz="UTC"))
    bad = pc.sum(pc.not_equal(stamps, pa.scalar(cutoff, pa.timestamp("us", tz="UTC")))).as_py() or 0
    if bad:
        raise ValueError(f"{embeddings_path}: {bad} rows have a cut-off other than the partition's {cutoff.isoformat()}")
    missing = emb.column("source_key").null_count + emb.column("entity_type").null_count
    if missing:
        raise ValueError(f"{embeddings_path}: {missing} rows lack a source_key or entity_type")
    tokens = _read_tokens(tokens_path)
    out = {}
    for raw_type in pc.unique(emb.column("entity_type")).to_pylist():
        t = type_name(raw_type)
        if t in out:
            raise ValueError(f"{embeddings_path}: entity types collide on the Feast name {t!r}")
        part = emb.filter(pc.equal(emb.column("entity_type"), raw_type))
        table = _feature_table(part, tokens, t, cutoff)
        write_parquet(Path(out_dir) / FEATURE_TABLE_FILE.format(entity_type=t), table)
        with_tokens = pc.sum(pc.greater(pc.list_value_length(table.column("bom_tokens")), 0)).as_py() or 0
        out[t] = {"rows": table.num_rows, "dim": dim, "with_tokens": with_tokens}
    return out


def _embedding_dim(emb: pa.Table, path: Path) -> int:
    kind = emb.schema.field("embedding").type
    if not pa.types.is_fixed_size_list(kind):
        raise ValueError(f"{path}: column embedding is {kind}, expected fixed_size_list<float32>[d]")
    return kind.list_size


def _read_tokens(path: Path | None) -> pa.Table:
    """The tokens of a partition keyed by entity_id; an empty table when there is no tokens file."""
    if path is None or not Path(path).exists():
        return pa.table({"entity_id": pa.array([], pa.int64()), "tokens": pa.array([], pa.list_(pa.int64())),
                         "weights": pa.array([], pa.list_(pa.float32()))})
    table = pq.read_table(path, columns=["entity_id", "tokens", "weights"])
    return table.cast(pa.schema([("entity_id", pa.int64()), ("tokens", pa.list_(pa.int64())),
                                 ("weights", pa.list_(pa.float32()))]))


def _feature_table(part: pa.Table, tokens: pa.Table, entity_type: str, cutoff: datetime) -> pa.Table:
    """One type's rows in the feature-table schema; entities without tokens get empty lists."""
    ids = part.column("entity_id").cast(pa.int64())
    tok, wts = _empty_lists(part.num_rows, pa.int64()), _empty_lists(part.num_rows, pa.float32())
    if tokens.num_rows:
        pos = pc.index_in(ids, value_set=tokens.column("entity_id"))
        found, take = pc.is_valid(pos), pc.fill_null(pos, 0)
        tok = pc.if_else(found, tokens.column("tokens").take(take), tok)
        wts = pc.if_else(found, tokens.column("weights").take(take), wts)
    columns = {
        join_key(entity_type): part.column("source_key").cast(pa.string()),
        "entity_id": ids,
        "hir_embedding": pc.cast(part.column("embedding"), FEATURES["hir_embedding"]),
        "bom_tokens": tok,
        "bom_weights": wts,
        "coarse_interest": part.column("coarse_prototype").cast(pa.int64()),
        "fine_interest": part.column("fine_prototype").cast(pa.int64()),
        "model_version": part.column("model_version").cast(pa.string()),
        TIMESTAMP_FIELD: pa.repeat(pa.scalar(cutoff, pa.timestamp("us", tz="UTC")), part.num_rows),
    }
    return pa.table(columns)


def _empty_lists(n: int, value_type: pa.DataType) -> pa.ListArray:
    return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, dtype=np.int32)), pa.array([], value_type))


def check_feature_table(path: Path, dim: int) -> dict[str, int]:
    """Hand-over checks of one feature table: counts that must all be zero.

    ``nonfinite_rows``: rows whose embedding holds a NaN or ±inf; ``wrong_dim_rows``: rows whose
    embedding length differs from ``dim``; ``duplicate_rows``: rows minus distinct (key, cut-off).
    """
    table = pq.read_table(path)
    emb = table.column("hir_embedding").combine_chunks()
    parents = pc.list_parent_indices(emb).to_numpy()
    values = pc.list_flatten(emb).to_numpy(zero_copy_only=False)
    key = table.schema.names[0]
    distinct = table.group_by([key, TIMESTAMP_FIELD]).aggregate([]).num_rows
    return {
        "nonfinite_rows": int(np.unique(parents[~np.isfinite(values)]).size),
        "wrong_dim_rows": int(pc.sum(pc.not_equal(pc.list_value_length(emb), dim)).as_py() or 0),
        "duplicate_rows": table.num_rows - distinct,
    }


class OnlineReader:
    """Online features by key through the online store's own ``online_read`` (any Feast online store).

    Why not ``get_online_features(...).to_dict()``: beyond the store's read it assembles a response
    protobuf and ``to_dict`` converts every value through Feast's generic type map (together about
    half of a 100-entity lookup on SQLite, 3-5 times a direct read of the store: ``hir bench
    feast``), and it resolves the views from the registry on each call. Here a view or feature
    service is resolved once per registry cache period (``cache_ttl_seconds``; 0 keeps it, as
    Feast's own cache does) and values are decoded straight from the store's protobufs. Keep one
    reader per thread and reuse it: it holds the store's connection.
    """

    BATCH = 5000  # keys per online_read (SQLite allows 32766 parameters in one statement)

    def __init__(self, store: "feast.FeatureStore"):  # noqa: F821
        from feast.infra.provider import get_provider

        self.store = store
        self._provider = get_provider(store.config)
        self._ttl = store.config.registry.cache_ttl_seconds
        self._resolved: dict[str, Any] = {}
        self._resolved_at = time.monotonic()

    def _cached(self, key: str, resolve):
        """``resolve()``'s value, kept for one registry cache period."""
        if self._ttl and time.monotonic() - self._resolved_at > self._ttl:
            self._resolved, self._resolved_at = {}, time.monotonic()
        if key not in self._resolved:
            self._resolved[key] = resolve()
        return self._resolved[key]

    def read(self, entity_type: str, keys: Iterable[str], features: Sequence[str] | None = None) -> dict[str, list]:
        """``{join key: keys, feature: [value per key]}`` of one type; a key the store lacks gets None values."""
        from feast.protos.feast.types.EntityKey_pb2 import EntityKey
        from feast.protos.feast.types.Value_pb2 import Value

        names, keys, key = list(features or FEATURES), [str(k) for k in keys], join_key(entity_type)
        view = self._cached(view_name(entity_type),
                            lambda: self.store.get_feature_view(view_name(entity_type), allow_registry_cache=True))
        rows = []
        for start in range(0, len(keys), self.BATCH):
            protos = [EntityKey(join_keys=[key], entity_values=[Value(string_val=k)]) for k in keys[start:start + self.BATCH]]
            rows += self._provider.online_read(self.store.config, view, protos, names)
        out: dict[str, list] = {key: keys}
        for name in names:
            out[name] = [None if values is None or name not in values else _python(values[name]) for _, values in rows]
        return out

    def service(self, name: str, entities: dict[str, Sequence[str]]) -> dict[str, list]:
        """Feature service ``name`` for ``entities`` (``{join key: [key per row]}``): ``{<view>__<feature>: [value per row]}``."""
        service = self._cached(f"service:{name}", lambda: self.store.get_feature_service(name, allow_cache=True))
        out: dict[str, list] = {}
        for projection in service.feature_view_projections:
            t = projection.name.removesuffix("_features")
            got = self.read(t, entities[join_key(t)], [f.name for f in projection.features])
            out.update({f"{projection.name_to_use()}__{f.name}": got[f.name] for f in projection.features})
        return out


def _python(value: "ValueProto") -> Any:  # noqa: F821
    """A Feast value protobuf as Python: None when unset, a list for list values, else the scalar.

    Covers hir's feature types (numbers, strings and lists of them); a timestamp stays seconds.
    """
    kind = value.WhichOneof("val")
    if kind is None or kind == "null_val":
        return None
    got = getattr(value, kind)
    return list(got.val) if kind.endswith("_list_val") else got


def _progress_to_stderr() -> contextlib.AbstractContextManager:
    """Feast prints its progress to stdout; stdout belongs to the caller (``hir eval --json`` writes
    its JSON there), so the progress goes to stderr."""
    return contextlib.redirect_stdout(sys.stderr)


class FeastStore(dg.ConfigurableResource):
    """The Feast repository ``feature_repo/`` over this data home: apply, materialise, read.

    ``data_home``: the platform's data home (registry, SQLite online store and feature tables live
    there); ``repo_path``: the folder holding ``feature_store.yaml`` and the definitions;
    ``online_store`` and ``online_url``: the online store (settings of the same names).
    """

    data_home: str
    repo_path: str = str(REPO_DIR)
    online_store: str = "sqlite"
    online_url: str = ""

    @classmethod
    def from_settings(cls, settings: Settings) -> "FeastStore":
        return cls(data_home=str(settings.data_home), online_store=settings.online_store, online_url=settings.online_url)

    @property
    def artifacts_dir(self) -> Path:
        return Settings.from_mapping({}, data_home=self.data_home).artifacts_dir

    @property
    def online_path(self) -> Path:
        """The SQLite online store's file (the default store)."""
        return Path(self.repo_config().online_store.path)

    @property
    def online_target(self) -> str:
        """Where online features live, for metadata: the SQLite file, or the server without its password."""
        if self.online_store == "sqlite":
            return str(self.online_path)
        parts = urllib.parse.urlsplit(self.online_url)
        return f"{self.online_store} {parts.hostname}:{parts.port or ''}{parts.path}"

    def repo_config(self) -> "feast.RepoConfig":  # noqa: F821
        """``feature_store.yaml`` with ``${HIR_DATA_HOME}`` replaced by this resource's data home and the
        online store the settings name (:func:`online_store_config`)."""
        import string

        import yaml
        from feast import RepoConfig

        text = (Path(self.repo_path) / "feature_store.yaml").read_text()
        raw = yaml.safe_load(string.Template(text).safe_substitute(HIR_DATA_HOME=self.data_home))
        raw["online_store"] = online_store_config(self.online_store, self.online_url) or raw["online_store"]
        config = RepoConfig(**raw)
        config.repo_path = Path(self.repo_path)
        # Readers keep the last materialised values while `materialize` holds a view in state
        # MATERIALIZING (Feast refuses to serve it otherwise, so every lookup during a
        # materialisation failed). Set here rather than in the YAML, where Feast warns that the
        # flag targets SQL registries; on this shared file registry it is what readers need.
        config.registry.serve_features_while_materializing = True
        return config

    def store(self) -> "feast.FeatureStore":  # noqa: F821
        """A ``feast.FeatureStore`` over this repository (creates ``<data home>/feast/``)."""
        from feast import FeatureStore

        Settings.from_mapping({}, data_home=self.data_home).feast_dir.mkdir(parents=True, exist_ok=True)
        return FeatureStore(config=self.repo_config())

    def require_registry(self) -> None:
        """Raise ``SettingsError`` when nothing was applied yet (no registry file)."""
        path = Path(self.repo_config().registry.path)
        if not path.exists():
            raise SettingsError(f"no Feast registry at {path}: materialise feast_registry first (hir run)")

    def apply(self, store: "feast.FeatureStore | None" = None) -> dict[str, list[str]]:  # noqa: F821
        """Register every entity, source, view and the feature service; returns their names by kind."""
        store = store or self.store()
        objects = feast_objects(self.artifacts_dir)
        with _progress_to_stderr():
            store.apply(list(objects.values()))
        kinds: dict[str, list[str]] = {}
        for obj in objects.values():
            kinds.setdefault(type(obj).__name__, []).append(obj.name)
        return kinds

    def materialize(self, start: datetime, end: datetime, entity_types: Sequence[str],
                    store: "feast.FeatureStore | None" = None) -> None:  # noqa: F821
        """Copy the newest row per entity with cut-off in ``[start, end]`` (inclusive) to the online store."""
        store = store or self.store()
        with _progress_to_stderr():
            store.materialize(start_date=start, end_date=end, feature_views=[view_name(t) for t in entity_types])

    def reader(self, store: "feast.FeatureStore | None" = None) -> OnlineReader:  # noqa: F821
        """An :class:`OnlineReader` over ``store`` (default: a new ``feast.FeatureStore``)."""
        return OnlineReader(store or self.store())

    def online(self, entity_type: str, keys: Iterable[str], features: Sequence[str] | None = None,
               reader: OnlineReader | None = None) -> dict[str, list]:
        """Online features of ``keys`` of one type: ``{column: [value per key]}``; unknown keys → None.

        ``reader``: one to reuse across calls (default: a new one, with a new connection).
        """
        return (reader or self.reader()).read(entity_type, keys, features)

    def training_set(self, entity_df: "pd.DataFrame", features: str | Sequence[str] = RANKER_SERVICE,  # noqa: F821
                     store: "feast.FeatureStore | None" = None) -> "pd.DataFrame":  # noqa: F821
        """A ranker training set: ``entity_df`` with point-in-time features joined on.

        Args:
            entity_df: one row per example with the join keys (e.g. ``user_key``, ``ad_key``), an
                ``event_timestamp`` column (the moment of the impression; naive values are UTC)
                and any labels. Each example gets, per view, the row with the greatest cut-off
                ``<= event_timestamp`` (features known at that moment), or nulls if none.
            features: a feature service name (default ``ranker_v1``) or ``view:feature`` references.
            store: an open ``feast.FeatureStore`` to reuse (default: a new one).
        Join keys are source-key strings. Returns the frame in the input's row order with feature
        columns ``<view>__<feature>``.
        """
        import pandas as pd

        if "event_timestamp" not in entity_df.columns:
            raise SettingsError("training_set: entity_df needs an event_timestamp column")
        store = store or self.store()
        frame = entity_df.copy()
        stamps = pd.to_datetime(frame["event_timestamp"])
        frame["event_timestamp"] = stamps.dt.tz_localize("UTC") if stamps.dt.tz is None else stamps.dt.tz_convert("UTC")
        frame["_row"] = range(len(frame))
        refs = store.get_feature_service(features) if isinstance(features, str) else list(features)
        out = store.get_historical_features(entity_df=frame, features=refs, full_feature_names=True).to_df()
        return out.sort_values("_row").drop(columns="_row").reset_index(drop=True)
