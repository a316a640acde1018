"""The command line (DESIGN §12), the top floor: the entry point (``main``), the in-process
runner, the sub-commands (``commands``) and the benchmarks (``bench``). May import anything.
"""
