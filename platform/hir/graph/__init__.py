"""The graph floor (DESIGN §3–5): the DuckDB warehouse, the source adapters, and daily snapshots.

May import the infrastructure floor (``hir.errors``, ``hir.settings``, ``hir.storage``) and
``hir.models``; nothing above.
"""
