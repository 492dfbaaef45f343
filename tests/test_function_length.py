"""No function or method above 60 lines in the package, the criteria and scripts/common."""

import ast

import pytest

from helpers import REPO_ROOT

MAX_LINES = 60
FOLDERS = ["relu_former", "criterions", "scripts/common"]


def long_functions(folder: str) -> list[str]:
    found = []
    for path in sorted((REPO_ROOT / folder).rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES:
                    found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno} "
                                 f"{node.name} ({lines} lines)")
    return found


@pytest.mark.parametrize("folder", FOLDERS)
def test_no_function_above_the_limit(folder):
    assert long_functions(folder) == []
