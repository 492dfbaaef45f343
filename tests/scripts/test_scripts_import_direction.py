"""Imports inside ``scripts/`` go one way: ``recipes/lib`` <- ``common`` <- ``analysis``,
``benchmarks`` <- ``demo``; no module imports itself back through others.

Read from the source (every ``import``/``from`` anywhere in a file, lazy ones included), so
the check needs neither fairseq nor torch.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

from helpers import REPO_ROOT

# folder -> the folders of scripts/ it may import from (besides itself)
ALLOWED = {
    "recipes": set(),
    "common": {"recipes"},
    "analysis": {"common", "recipes"},
    "benchmarks": {"common", "recipes"},
    "demo": {"common", "recipes", "analysis"},
    # the reproduction tables wrap the analysis scripts, the benchmarks and the demo's data
    "reproduce": {"common", "recipes", "analysis", "benchmarks", "demo"},
}
# module -> folders it may import from besides its folder's: this benchmark times the
# reproduction's own cells, so it builds them with the reproduction's code
ALSO_ALLOWED = {"scripts.benchmarks.bench_toy_update": {"reproduce"}}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> Dict[str, Set[str]]:
    """Module -> the modules of ``scripts`` it imports."""
    files = {module_name(p): p for p in (REPO_ROOT / "scripts").rglob("*.py")}
    graph = {}
    for name, path in files.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets.add(node.module)
                targets.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
        graph[name] = {t for t in targets if t in files and t != name}
    return graph


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Every cycle a depth-first walk meets (one per back edge)."""
    state: Dict[str, int] = {}
    found: List[List[str]] = []

    def visit(node: str, path: List[str]) -> None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                found.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target, path)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return found


def test_no_import_cycle_inside_scripts():
    graph = import_graph()
    assert len(graph) > 40  # the walk saw the tree
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]


def test_folders_import_only_downwards():
    wrong = []
    for module, targets in import_graph().items():
        folder = module.split(".")[1] if module.count(".") else None
        for target in targets:
            target_folder = target.split(".")[1]
            allowed = ALLOWED.get(folder, set()) | ALSO_ALLOWED.get(module, set())
            if folder and target_folder != folder and target_folder not in allowed:
                wrong.append(f"{module} imports {target}")
    assert wrong == []
