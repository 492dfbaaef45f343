"""Imports go one way: no cycle inside relu_former/ (with criterions/) or scripts/.

The same check from the command line: ``python tests/import_graph.py``.
"""

import pytest
from import_graph import cycles, import_graph


@pytest.mark.parametrize("roots", [("relu_former", "criterions"), ("scripts",)],
                         ids=["relu_former", "scripts"])
def test_no_import_cycle(roots):
    assert cycles(import_graph(roots)) == []


def test_the_check_finds_a_cycle():
    """The detector itself: a two-module loop and a self-contained chain."""
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": set(), "d": {"c"}}
    assert cycles(graph) == [["a", "b"]]


def test_graph_sees_the_kernel_imports():
    """Sanity: the edges the layout promises exist (so an empty cycle list means something)."""
    graph = import_graph(("relu_former", "criterions"))
    kernels = "relu_former.relu_attention.kernels."
    assert graph[kernels + "dispatch"] >= {kernels + b for b in ("reference", "tiled", "flex")}
    for backend in ("reference", "tiled", "flex"):
        assert {m for m in graph[kernels + backend] if m.startswith(kernels)} == {
            kernels + "common"}
    assert "relu_former.relu_attention.regularisers" in graph["relu_former.criterions.regularized"]
