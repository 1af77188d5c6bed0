"""The import layering of docs/ARCHITECTURE.md, checked with `ast` over the source tree:

    errors -> yamlio, resources, units, plugins -> arch, metrics -> space, models -> runtimes
    -> cost -> latency -> study -> trainers -> sweep -> analysis -> cli

A module may import its own package and the layers below its own, never a sibling of its own
layer or anything above (lazy imports inside functions included); no package's modules import
each other in a circle; no module imports another module's private (`_name`) names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# folder -> import prefix (archsearch/trainers and archsearch/analysis are symlinks to these)
SOURCES = {
    ROOT / "archsearch": "archsearch",
    ROOT / "trainers": "archsearch.trainers",
    ROOT / "analysis": "archsearch.analysis",
}
LAYERS = [
    {"errors"},
    {"yamlio", "resources", "units", "plugins"},
    {"arch", "metrics"},
    {"space", "models"},
    {"runtimes"},
    {"cost"},
    {"latency"},
    {"study"},
    {"trainers"},
    {"sweep"},
    {"analysis"},
    {"cli"},
]
LEVEL = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}


def modules() -> dict[str, Path]:
    out = {}
    for folder, prefix in SOURCES.items():
        for path in folder.rglob("*.py"):
            if ".venv" in path.parts or "__pycache__" in path.parts:
                continue
            if (folder / path.relative_to(folder).parts[0]).is_symlink():
                continue  # read through its own folder
            rel = path.relative_to(folder).with_suffix("").parts
            name = ".".join((prefix, *rel)).removesuffix(".__init__")
            out[name] = path
    return out


MODULES = modules()


def unit(module: str) -> str | None:
    """`archsearch.cost.counts` -> `cost`; the package root itself -> None."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def imports(path: Path, module: str) -> list[tuple[str, list[str], int]]:
    """(imported archsearch module, names taken from it, line) for every import statement."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("archsearch"):
                    out.append((alias.name, [], node.lineno))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if base.startswith("archsearch"):
                out.append((base, [a.name for a in node.names], node.lineno))
    return out


EDGES = {m: imports(p, m) for m, p in MODULES.items()}


def test_every_source_folder_is_covered_by_a_layer():
    units = {unit(m) for m in MODULES} - {None}
    assert units <= set(LEVEL), f"packages missing from the layer table: {units - set(LEVEL)}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down_only(module):
    src = unit(module)
    if src is None:
        return
    bad = []
    for target, _names, line in EDGES[module]:
        dst = unit(target)
        if dst is None or dst == src:
            continue
        if LEVEL[dst] >= LEVEL[src]:
            bad.append(f"line {line}: {target} ({dst}, layer {LEVEL[dst]})")
    assert not bad, f"{module} (layer {LEVEL[src]}: {src}) imports upward or sideways: {bad}"


def test_no_private_names_cross_modules():
    bad = []
    for module, edges in EDGES.items():
        for target, names, line in edges:
            if target == module:
                continue
            for name in names:
                if name.startswith("_") and not name.startswith("__"):
                    bad.append(f"{module}:{line} imports {target}.{name}")
    assert not bad, bad


def test_no_import_circles():
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, edges in EDGES.items():
        for target, names, _line in edges:
            # `from pkg import mod` names a submodule: the edge goes to it
            targets = [f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES] or [target]
            for t in targets:
                if t in MODULES and t != module and not module.startswith(t + "."):
                    graph[module].add(t)
    # a package's __init__ re-exporting its modules is not a circle with them
    for module in graph:
        graph[module] = {
            t
            for t in graph[module]
            if not (MODULES[t].name == "__init__.py" and module.startswith(t + "."))
        }
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                return [*stack[stack.index(t) :], t]
            if t not in state and (cycle := visit(t)):
                return cycle
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (cycle := visit(m)):
            pytest.fail(" -> ".join(cycle))


def test_layer_table_matches_the_architecture_page():
    page = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    for layer in LAYERS:
        for name in layer:
            assert f"`{name}`" in page, f"docs/ARCHITECTURE.md does not mention `{name}`"
