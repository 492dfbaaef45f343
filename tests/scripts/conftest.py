"""Table 4's tiny data on the French fixture catalogs, built once for the whole test run: the
tests of Table 4's (and Table 5's) cells and the toy-update benchmark copy it instead of
building it again (``reproduce/settings_args.copy_table4_data``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.reproduce.__main__ import main
from tests.scripts.reproduce.settings_args import T4, sets

from catalog_fixtures import write_fixture_catalogs


@pytest.fixture(scope="session")
def table4_data(made_once) -> Path:
    """``locale``, the French fixture catalogs, and ``work/data``, Table 4's tiny data on them
    (a dry run builds it). Read only: tests copy it (``copy_table4_data``)."""

    def make(folder: Path) -> None:
        locale = write_fixture_catalogs(folder / "locale", "fr").resolve()
        assert main([T4, "--dry-run", "--scale", "tiny", "--seeds", "1",
                     *sets({"locale_dir": str(locale)}), "--work", str(folder / "work")]) == 0

    return made_once("table4_data", make)
