"""The floors of ``hir`` (see ``platform/hir/__init__.py``): no import goes up a floor, none goes in a circle.

Every ``import`` counts, also one inside a function: a deferred import is still a dependency.
"""

from __future__ import annotations

import ast
from collections import defaultdict

import pytest
from conftest import REPO

ROOTS = {"hir": REPO / "platform" / "hir", "hir.assets": REPO / "assets", "hir.models": REPO / "models"}

# Floor of each module prefix, the longest prefix wins. Same floor may import same floor.
FLOORS = {
    "hir": 0, "hir.errors": 0, "hir.settings": 0, "hir.storage": 0, "hir.instance": 0,
    "hir.plots": 0, "hir.tables": 0, "hir.models": 0,
    "hir.graph": 1, "hir.world_knowledge": 1,
    "hir.training": 2,
    "hir.tokens": 3, "hir.serving": 3,
    "hir.evaluation": 4,
    "hir.resources": 5, "hir.partitions": 5,
    "hir.assets": 6,
    "hir.jobs": 7, "hir.automation": 7, "hir.definitions": 8,
    "hir.cli": 9,
}


def floor_of(module: str) -> int:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in FLOORS:
            return FLOORS[".".join(parts[:n])]
    raise KeyError(f"{module} is on no floor: add it to FLOORS and to hir's docstring")


def modules() -> dict[str, ast.Module]:
    found = {}
    for prefix, root in ROOTS.items():
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).with_suffix("").parts
            name = ".".join((prefix, *rel[:-1]) if rel[-1] == "__init__" else (prefix, *rel))
            if prefix == "hir" and rel[0] in {"assets", "models"}:
                continue
            found[name] = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return found


def imports(tree: ast.Module, known: set[str]) -> set[str]:
    """The hir modules a module imports (``from hir.x import y`` counts as hir.x.y when that is a module)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("hir")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hir") and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                out.add(sub if sub in known else node.module)
    return out


MODULES = modules()
GRAPH = {name: imports(tree, set(MODULES)) for name, tree in MODULES.items()}


def test_every_module_has_a_floor():
    for name in GRAPH:
        floor_of(name)


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_no_import_goes_up_a_floor(module):
    up = sorted(t for t in GRAPH[module] if floor_of(t) > floor_of(module))
    assert not up, f"{module} (floor {floor_of(module)}) imports from above: {up}"


def test_models_import_nothing_else_of_hir():
    for module, targets in GRAPH.items():
        if module.startswith("hir.models"):
            assert all(t.startswith("hir.models") for t in targets), (module, targets)


def test_no_import_circle():
    edges = defaultdict(set)
    for module, targets in GRAPH.items():
        edges[module] |= {t for t in targets if t in GRAPH and t != module and not module.startswith(t + ".")}
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                raise AssertionError("import circle: " + " -> ".join(path[path.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module, [module])


def test_a_planted_upward_import_is_caught():
    tree = ast.parse("from hir.cli.runner import run_pipeline\n")
    assert floor_of(next(iter(imports(tree, set(GRAPH))))) > floor_of("hir.graph.snapshot")
