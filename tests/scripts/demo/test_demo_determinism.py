"""The demo's figures depend on the seed and the thread count, not on the machine's load nor
on the other part running beside them: the tiny demo of both parts, squeezed onto one core,
gives the figures of each part run alone (the runs the other demo tests read,
``conftest.py``). On one core its two jobs get at most half a core each (a busy loop beside
them on 2 cores would leave them two thirds) and preempt each other: their timing changes, and
a figure that depended on time would too. A loop would test the same and burn a core the whole
run."""

from __future__ import annotations

import os

import pytest

from scripts.demo.report import SUMMARY_HEADERS, TABLE_HEADERS

from demo_runs import run_tiny_demo
from helpers import table_by_label

# times and the speeds computed from them are the only columns load may change
TIMED_COLUMNS = {"train s", "words/s", "train CPU s", "train speed", "decode s", "decode speed"}
TABLES = {"translation": TABLE_HEADERS, "summaries": SUMMARY_HEADERS}


def _figures(report: str, tables=tuple(TABLES)) -> dict:
    """Every (table, row, column) cell of ``tables`` but the timed ones."""
    figures = {}
    for name in tables:
        for label, row in table_by_label(report, TABLES[name]).items():
            for column, cell in row.items():
                if column not in TIMED_COLUMNS:
                    figures[name, label, column] = cell
    return figures


def _sentences(report: str) -> list:
    """The report's findings (the summaries' speed sentence aside)."""
    return [line for line in report.splitlines()
            if line.startswith("- ") and "speed" not in line]


@pytest.mark.slow
def test_tiny_demo_gives_the_same_figures_quiet_and_squeezed_onto_one_core(demo_fixtures,
                                                                          tmp_path, request):
    # its --jobs and --threads are the defaults of the runs alone: the core count, not the
    # cores it may use, sets them
    core = min(os.sched_getaffinity(0))
    run_tiny_demo(tmp_path / "squeezed", "--locale-dir", demo_fixtures / "locale",
                  "--man-dir", demo_fixtures / "man", prefix=["taskset", "--cpu-list", core])
    squeezed = (tmp_path / "squeezed" / "report.md").read_text()
    # each part alone, without a loop: asked for only now, another worker may be making them
    alone = {name: (request.getfixturevalue(f"tiny_{name}").out / "report.md").read_text()
             for name in TABLES}
    figures = {key: cell for name, report in alone.items()
               for key, cell in _figures(report, [name]).items()}
    # both tables, models and reference rows, every model at its whole update budget
    assert {name for name, _, _ in figures} == {"translation", "summaries"}
    updates = {cell for (_, label, column), cell in figures.items()
               if column == "updates" and not label.startswith("reference")}
    assert updates == {"20", "10"}, updates
    assert any(column == "BLEU" and label.startswith("reference")
               for _, label, column in figures)
    assert _figures(squeezed) == figures
    # so are the sentences drawn from them, in the same order
    quiet = _sentences(alone["translation"]) + _sentences(alone["summaries"])
    assert quiet and _sentences(squeezed) == quiet
