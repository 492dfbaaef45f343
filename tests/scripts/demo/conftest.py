"""The tiny demo's two parts, each run alone on the fixtures once for the whole test run
(``demo_runs.py``): the tests of each table read them, and the determinism test compares a
run of both parts with them."""

from __future__ import annotations

from pathlib import Path

import pytest

from demo_runs import TinyDemo, run_tiny_demo_here, write_demo_fixtures


@pytest.fixture(scope="session")
def demo_fixtures(made_once) -> Path:
    """The catalogs (``locale``) and manual pages (``man``) the tiny demo reads (read only)."""
    return made_once("demo_fixtures", write_demo_fixtures)


def _part(made_once, fixtures: Path, name: str, *flags) -> TinyDemo:
    def make(folder: Path) -> None:
        (folder / "stdout.txt").write_text(run_tiny_demo_here(folder / "report", *flags))

    folder = made_once(name, make)
    return TinyDemo(folder / "report", (folder / "stdout.txt").read_text(), fixtures)


@pytest.fixture(scope="session")
def tiny_translation(made_once, demo_fixtures) -> TinyDemo:
    """``--tiny --no-summaries`` on the fixture catalogs."""
    return _part(made_once, demo_fixtures, "tiny_translation", "--no-summaries",
                 "--locale-dir", demo_fixtures / "locale")


@pytest.fixture(scope="session")
def tiny_summaries(made_once, demo_fixtures) -> TinyDemo:
    """``--tiny --no-translation`` on the fixture manual pages."""
    return _part(made_once, demo_fixtures, "tiny_summaries", "--no-translation",
                 "--man-dir", demo_fixtures / "man")
