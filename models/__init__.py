"""PyTorch only: data views, modules, losses, trainer, quantizer, index. No Dagster, DuckDB or Feast here."""
