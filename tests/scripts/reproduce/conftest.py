"""Table 4's ReLUFormer row at tiny scale on the French fixture catalogs, trained once for
the whole test run: the rows that start from it (Table 6) or measure it (Table 5) read a copy
(``settings_args.copy_table4_relu_former``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.reproduce.__main__ import main
from tests.scripts.reproduce.settings_args import GRID, T4, sets

from catalog_fixtures import write_fixture_catalogs


@pytest.fixture(scope="session")
def table4_relu_former(made_once) -> Path:
    """The folder of that run: ``locale``, ``work``, ``reproduction.md`` and ``reproduction``
    (the records). Read only."""

    def make(folder: Path) -> None:
        locale = write_fixture_catalogs(folder / "locale", "fr")
        assert main([T4, "--rows", "relu_former", *sets({"locale_dir": str(locale), **GRID}),
                     "--scale", "tiny", "--seeds", "1", "--work", str(folder / "work"),
                     "--out", str(folder / "reproduction.md")]) == 0

    return made_once("table4_relu_former", make)
