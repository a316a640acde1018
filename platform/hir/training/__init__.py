"""Training (DESIGN §7) seen from the platform: the settings → model-config mapping
(``training_configs``) and the ``torchrun`` entry point. May import the infrastructure floor,
``graph``, ``world_knowledge`` and ``hir.models``.
"""
