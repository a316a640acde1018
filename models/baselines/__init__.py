"""Retrieval baselines behind one interface, one model a module.

``base``: the contract — :class:`~hir.models.baselines.base.Interactions`, ``Queries``, ``Scorer``,
``evaluate``, ``last_items`` and ``RandomScorer`` (the floor). The baselines: ``popularity``
(time-decayed), ``cooccurrence`` (item kNN over consecutive pairs), ``als`` (``implicit`` matrix
factorisation), ``lightgcn`` (torch_geometric, BPR), ``sasrec`` (full cross-entropy over all
items), ``text_world_knowledge`` (cosine to the mean of the user's item text vectors); ``neural``
holds what LightGCN and SASRec share (optimisation settings, early stopping). hir's own scorers
live in :mod:`hir.evaluation.scorers`.
"""
