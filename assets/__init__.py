"""Dagster assets and checks, one module per stage (DESIGN §2)."""
