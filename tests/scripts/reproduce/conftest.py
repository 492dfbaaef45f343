"""Table 6's tiny data beside Table 4's (``tests/scripts/conftest.py``) and Table 7's on the
fixture manual pages, each built once for the whole test run; and Table 4's rows at tiny
scale on Table 4's data, each trained once: the ReLUFormer row on a one-rate grid, which the
rows that start from it (Table 6) or measure it (Table 5) read a copy of, and the Transformer
row on its own grid, which the protocol test reads, the patience test compares a resumed
training with (its chosen cell: that training in one go) and the generation table's rows
fine-tune a copy of (``settings_args.copy_table4_run``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from scripts.reproduce.__main__ import main
from tests.scripts.demo.manpage_fixtures import write_fixture_man_pages
from tests.scripts.reproduce.settings_args import GRID, T4, copy_table4_data, data_folder, sets


@pytest.fixture(scope="session")
def table6_data(made_once, table4_data) -> Path:
    """``work/data``: Table 6's tiny data (sentences and documents) on ``table4_data``'s
    catalogs, built by a dry run of its document row beside a copy of Table 4's data, which
    is then left out. Read only."""

    def make(folder: Path) -> None:
        data = {"locale_dir": str(copy_table4_data(table4_data, folder))}
        assert main(["relu_former_table6", "--dry-run", "--scale", "tiny", "--seeds", "1",
                     "--rows", "relu_former_128", *sets(data), *sets({**data, **GRID}, T4),
                     "--work", str(folder / "work")]) == 0
        shutil.rmtree(folder / "work" / "data" / data_folder(table4_data).name)

    return made_once("table6_data", make)


@pytest.fixture(scope="session")
def table7_data(made_once) -> Path:
    """``man``, the fixture manual pages, and ``work/data``, Table 7's tiny data on them (a dry
    run of its Pyramidion row builds it). Read only: tests copy it."""

    def make(folder: Path) -> None:
        man = write_fixture_man_pages(folder / "man").resolve()
        assert main(["pyramidion_table7", "--dry-run", "--scale", "tiny", "--seeds", "1",
                     "--rows", "pyramidion", "--set", f"man_dir={man}",
                     "--work", str(folder / "work")]) == 0

    return made_once("table7_data", make)


def _table4_run(made_once, table4_data: Path, row: str, settings: dict) -> Path:
    """The folder of Table 4's ``row`` run once with ``settings`` on ``table4_data``:
    ``locale`` (a link to its catalogs), ``work``, ``reproduction.md`` and ``reproduction``
    (the records). Read only."""

    def make(folder: Path) -> None:
        locale = copy_table4_data(table4_data, folder)
        (folder / "locale").symlink_to(locale, target_is_directory=True)
        assert main([T4, "--rows", row, *sets({"locale_dir": str(locale), **settings}),
                     "--scale", "tiny", "--seeds", "1", "--work", str(folder / "work"),
                     "--out", str(folder / "reproduction.md")]) == 0

    return made_once(f"table4_{row}", make)


@pytest.fixture(scope="session")
def table4_relu_former(made_once, table4_data) -> Path:
    """The ReLUFormer row at the one rate of ``GRID``."""
    return _table4_run(made_once, table4_data, "relu_former", GRID)


@pytest.fixture(scope="session")
def table4_transformer(made_once, table4_data) -> Path:
    """The Transformer row at the tiny scale's own settings: its 3-rate grid, then the chosen
    rate's cell trained to a plateau and decoded."""
    return _table4_run(made_once, table4_data, "transformer", {})
