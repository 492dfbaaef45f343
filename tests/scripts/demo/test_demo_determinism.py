"""The demo's figures depend on the seed and the thread count, not on the machine's load:
the tiny demo (the run of both parts the other demo tests read, ``demo_runs.py``) gives the
same table again with a busy CPU loop beside it (on 2 cores with the
other test worker running, the demo then gets about two thirds of a core: its timing changes,
and a figure that depended on time would too). One loop, not more: each further loop slowed
this run, and the other worker beside it, without testing anything new."""

from __future__ import annotations

import multiprocessing

import pytest

from scripts.demo.report import SUMMARY_HEADERS, TABLE_HEADERS

from demo_runs import fixture_flags, run_tiny_demo
from helpers import table_by_label

# times and the speeds computed from them are the only columns load may change
TIMED_COLUMNS = {"train s", "words/s", "train CPU s", "train speed", "decode s", "decode speed"}


def _busy(stop) -> None:
    while not stop.is_set():
        sum(range(10_000))


def _figures(report: str) -> dict:
    """Every (table, row, column) cell of both tables but the timed ones."""
    figures = {}
    for name, headers in (("translation", TABLE_HEADERS), ("summaries", SUMMARY_HEADERS)):
        for label, row in table_by_label(report, headers).items():
            for column, cell in row.items():
                if column not in TIMED_COLUMNS:
                    figures[name, label, column] = cell
    return figures


@pytest.mark.slow
def test_tiny_demo_gives_the_same_figures_quiet_and_beside_a_busy_loop(demo_fixtures, tmp_path,
                                                                      request):
    context = multiprocessing.get_context("fork")
    stop = context.Event()
    loop = context.Process(target=_busy, args=(stop,), daemon=True)
    loop.start()
    try:
        run_tiny_demo(tmp_path / "busy", *fixture_flags(demo_fixtures))
    finally:
        stop.set()
        loop.join(30)
    busy = (tmp_path / "busy" / "report.md").read_text()
    # the run without a loop beside it, asked for only now: another worker may be making it
    quiet = (request.getfixturevalue("tiny_demo").out / "report.md").read_text()
    figures = _figures(quiet)
    # both tables, models and reference rows, every model at its whole update budget
    assert {name for name, _, _ in figures} == {"translation", "summaries"}
    updates = {cell for (_, label, column), cell in figures.items()
               if column == "updates" and not label.startswith("reference")}
    assert updates == {"20", "10"}, updates
    assert any(column == "BLEU" and label.startswith("reference")
               for _, label, column in figures)
    assert _figures(busy) == figures
    # so are the sentences drawn from them (the summaries' speed sentence aside)
    sentences = [[line for line in report.splitlines()
                  if line.startswith("- ") and "speed" not in line] for report in (quiet, busy)]
    assert sentences[0] and sentences[0] == sentences[1]
