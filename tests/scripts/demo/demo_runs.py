"""The tiny demo as the tests run it, and the one run of both parts on the fixtures that
the tests of its tables and of its determinism read (``conftest.py`` makes it once)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from catalog_fixtures import write_fixture_catalogs
from helpers import run_command
from manpage_fixtures import write_fixture_man_pages


def run_tiny_demo(out: Path, *flags) -> subprocess.CompletedProcess:
    return run_command([sys.executable, "-m", "scripts.demo.demo", "--tiny", "--quiet", *flags,
                        "--out", out], timeout=1800)


def write_demo_fixtures(folder: Path) -> None:
    """The gettext catalogs (``folder/locale``) and manual pages (``folder/man``)."""
    write_fixture_catalogs(folder / "locale")
    write_fixture_man_pages(folder / "man")


def fixture_flags(fixtures: Path) -> list:
    """The demo's flags that read the fixtures ``write_demo_fixtures(fixtures)`` wrote."""
    return ["--locale-dir", fixtures / "locale", "--man-dir", fixtures / "man"]


@dataclass(frozen=True)
class TinyDemo:
    """A finished run of both parts; tests read it and copy what they change."""
    out: Path  # the report folder
    stdout: str
    fixtures: Path  # what it ran on: write_demo_fixtures(fixtures)

    @property
    def man(self) -> Path:
        return self.fixtures / "man"

    @property
    def flags(self) -> list:
        return fixture_flags(self.fixtures)
