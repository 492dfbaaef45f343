"""The tiny demo's run of both parts on the fixtures, made once for the whole test run
(``demo_runs.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from demo_runs import TinyDemo, fixture_flags, run_tiny_demo, write_demo_fixtures


@pytest.fixture(scope="session")
def demo_fixtures(made_once) -> Path:
    """The catalogs and manual pages every run of the tiny demo reads (read only)."""
    return made_once("demo_fixtures", write_demo_fixtures)


@pytest.fixture(scope="session")
def tiny_demo(made_once, demo_fixtures) -> TinyDemo:
    def make(folder: Path) -> None:
        proc = run_tiny_demo(folder / "report", *fixture_flags(demo_fixtures))
        (folder / "stdout.txt").write_text(proc.stdout)

    folder = made_once("tiny_demo", make)
    return TinyDemo(folder / "report", (folder / "stdout.txt").read_text(), demo_fixtures)
