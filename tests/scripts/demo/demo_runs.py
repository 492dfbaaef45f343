"""The tiny demo as the tests run it, on the fixtures, and what a finished run left."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from catalog_fixtures import write_fixture_catalogs
from helpers import run_command
from manpage_fixtures import write_fixture_man_pages


def run_tiny_demo(out: Path, *flags, prefix: Sequence[object] = ()
                  ) -> subprocess.CompletedProcess:
    """The tiny demo with ``flags`` into ``out``; ``prefix`` comes before the command (a
    ``taskset``, say)."""
    return run_command([*prefix, sys.executable, "-m", "scripts.demo.demo", "--tiny", "--quiet",
                        *flags, "--out", out], timeout=1800)


def run_tiny_demo_here(out: Path, *flags) -> str:
    """:func:`run_tiny_demo` in this process (its fairseq commands are processes all the
    same): the demo's interpreter start, torch and fairseq's imports, is saved. Returns its
    stdout; torch's thread count, which its attention analysis sets, is put back."""
    import torch

    from scripts.demo import demo

    threads, stdout = torch.get_num_threads(), io.StringIO()
    try:
        with contextlib.redirect_stdout(stdout):
            assert demo.main(["--tiny", "--quiet", *map(str, flags), "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)
    return stdout.getvalue()


def write_demo_fixtures(folder: Path) -> None:
    """The gettext catalogs (``folder/locale``) and manual pages (``folder/man``)."""
    write_fixture_catalogs(folder / "locale")
    write_fixture_man_pages(folder / "man")


@dataclass(frozen=True)
class TinyDemo:
    """A finished run (``conftest.py`` makes them once); tests read it, never change it."""
    out: Path  # the report folder
    stdout: str
    fixtures: Path  # what it ran on: write_demo_fixtures(fixtures)
