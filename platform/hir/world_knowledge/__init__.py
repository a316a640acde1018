"""World knowledge (DESIGN §6): text and image embedders and the content-hash embedding cache.

May import the infrastructure floor and ``hir.models``; nothing else of the domain.
"""
