"""World knowledge (DESIGN §6): text and image embedders (``embedders``), the content-hash
embedding cache and the fusion per entity (``store``), and the fused vectors a training run reads
(``vectors``).

May import the infrastructure floor and ``hir.models``; nothing else of the domain.
"""
