"""hir: Hierarchical Interest Representation for ads and recommendation.

The package is built in floors; a module imports only from its own floor or below (checked by
``tests/test_layering.py``):

1. infrastructure — ``errors``, ``settings``, ``storage``, ``instance``, ``plots``, ``tables``;
   ``hir.models`` (PyTorch only) sits beside it and imports nothing else of ``hir``.
2. domain, mirroring the asset groups — ``graph`` (warehouse, sources, snapshots),
   ``world_knowledge``, ``training``, ``tokens``, ``serving`` (Feast), ``evaluation``.
3. Dagster resources and partitions — ``resources``, ``partitions``.
4. the assets (``hir.assets``), then the wiring — ``jobs``, ``automation``, ``definitions``.
5. the command line — ``cli`` (entry point, runner, commands, benchmarks).
"""
