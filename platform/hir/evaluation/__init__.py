"""Evaluation (DESIGN §10): protocols and splits, the scorers (hir's and the baselines'), the
downstream rankers, token quality and the report.

The top of the domain floor: may import every other domain package, the infrastructure floor and
``hir.models``; never the Dagster wiring or the command line.
"""
