"""PyTorch only — no Dagster, DuckDB or Feast here, nothing else of ``hir``.

Data views: ``graph`` (snapshot CSR), ``sampler`` (random-walk views), ``hashing``, ``planted``
(synthetic test graphs). Modules: ``attention``, ``encoder``, ``engagement``, ``losses`` and
``model`` (the HIR model and its training config). Training and inference: ``trainer`` (the loop),
``checkpoint`` (safetensors weights, JSON configs and state), ``inference`` (embedding every
node), ``clustering`` (nested k-means). Tokens and retrieval: ``quantizer``, ``index``, ``metrics``.
``baselines``: the retrieval baselines, one model a module.
"""
