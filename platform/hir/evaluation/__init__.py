"""Evaluation (DESIGN §10): ``protocols`` (the leave-last-out and temporal splits, fitting and
scoring every scorer on one), ``data`` (a partition's split and the artefacts hir's scorers read),
``scorers`` (the one list of scorers: the baselines' and hir's), ``rankers`` (the downstream
click and conversion rankers), ``token_quality`` and ``report``.

The top of the domain floor: may import every other domain package, the infrastructure floor and
``hir.models``; never the Dagster wiring or the command line.
"""
