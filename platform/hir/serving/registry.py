"""A Feast file registry store whose writes are atomic (``registry.registry_store_type`` in
``feature_repo/feature_store.yaml``).

Feast's own ``FileRegistryStore`` rewrites ``registry.db`` in place (open with truncation, then
write). Every ``materialize`` records its interval in the registry, and a reader in another
thread or process that refreshes its cache at that moment (Feast re-reads the file whenever its
modification time changes) parses a truncated file: an empty registry, so ``get_online_features``
fails with "feature view … does not exist". Here the new registry is written beside the file and
renamed over it (:func:`hir.storage.write_bytes`), so a reader sees the old or the new registry.
Imported by Feast only when it opens the registry, so importing ``hir`` stays light.
"""

from __future__ import annotations

import uuid

from feast.infra.registry.file import FileRegistryStore
from feast.protos.feast.core.Registry_pb2 import Registry as RegistryProto
from feast.utils import _utc_now

from hir.storage import write_bytes


class AtomicFileRegistryStore(FileRegistryStore):
    """``FileRegistryStore`` with an atomic write (temporary file, fsync, rename)."""

    def _write_registry(self, registry_proto: RegistryProto) -> None:
        registry_proto.version_id = str(uuid.uuid4())
        registry_proto.last_updated.FromDatetime(_utc_now())
        write_bytes(self._filepath, registry_proto.SerializeToString())
