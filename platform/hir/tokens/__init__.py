"""Bag-of-Meaning tokens (DESIGN §8): quantising embeddings into nested tokens, bags, the index.

May import the infrastructure floor, ``hir.models`` and the domain packages below it
(``graph``, ``world_knowledge``, ``training``).
"""
