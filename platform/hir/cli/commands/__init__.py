"""Sub-commands of `hir`: each module exposes HELP, add_arguments(parser) and run(args, settings) -> int."""
