"""The import graph of the repository's packages, and its cycles (a command and a helper).

    python tests/import_graph.py                       # relu_former, criterions, scripts
    python tests/import_graph.py relu_former           # some roots only

Reads the sources with ``ast`` (nothing is imported): every ``import`` and ``from ... import``
(at module level or inside a function, relative ones resolved; those under ``if
TYPE_CHECKING:`` skipped) between modules of the given roots is an edge. A package's own
``__init__`` is not an edge of its submodules (Python imports it first anyway). ``criterions/``
is installed as ``relu_former.criterions`` (setup.py), and named so here. Exit status 1 and
one line per cycle when there is one.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Set

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ROOTS = ("relu_former", "criterions", "scripts")
# folder -> the package name it is installed as
INSTALLED_AS = {"criterions": "relu_former.criterions"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    name = ".".join(parts)
    for folder, package in INSTALLED_AS.items():
        if name == folder or name.startswith(folder + "."):
            name = package + name[len(folder):]
    return name


def _type_checking_nodes(tree: ast.AST) -> Set[int]:
    skipped: Set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(child) for child in ast.walk(node))
    return skipped


def imported_names(path: Path, name: str, is_package: bool) -> Iterable[str]:
    """Every module name ``path`` imports (candidates; unknown ones are filtered later)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skipped = _type_checking_nodes(tree)
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph(roots: Iterable[str] = DEFAULT_ROOTS) -> Dict[str, Set[str]]:
    """{module: modules of the roots it imports}, without edges to its own packages."""
    files = {module_name(p): p for root in roots for p in (REPO_ROOT / root).rglob("*.py")}
    graph: Dict[str, Set[str]] = {}
    for name, path in files.items():
        targets = set()
        for imported in imported_names(path, name, path.stem == "__init__"):
            if imported in files and imported != name and not name.startswith(imported + "."):
                targets.add(imported)
        graph[name] = targets
    return graph


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components with more than one module (Tarjan), sorted."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def main(argv: List[str]) -> int:
    found = cycles(import_graph(argv or DEFAULT_ROOTS))
    for component in found:
        print("import cycle: " + " <-> ".join(component))
    if not found:
        print(f"no import cycle in {', '.join(argv or DEFAULT_ROOTS)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
