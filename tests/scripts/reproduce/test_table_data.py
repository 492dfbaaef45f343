"""The tables' data is the tables': their corpora are built by code the demo shares
(``scripts.common.gettext_corpus``, ``scripts.demo.summary_data``), so a change there for the
demo's sake could change every table's data under keys that do not say so (a cell's key holds
the data's description, its sizes, not its text). Here each kind's data is built from the
fixtures at the tests' scale and its text hashed: a change of the shared code that changes
the tables' data fails, and says so."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.scripts.reproduce.settings_args import data_folder

# the hashes of the tables' data text at the tests' scale, as the code builds it today
EXPECTED = {
    "relu_former_table6": "2badcc400737990eda6df09632a20aa70293ad4fd321e29ab5b7e5562255def8",
    "pyramidion_table7": "9b22555f1ff19b0c1eafba75621394490639b674a8628fd36e112b898fd222ba",
}
CHANGED = ("the {table} data built from the fixtures changed (sha256 {now}): the corpus code "
           "the tables share with the demo builds other data. If the tables' data is meant to "
           "change, add a 'Re-keyed:' note to the specs of the tables built from it and update "
           "EXPECTED; if only the demo's should, give the demo its own choice instead")


def text_hash(folder: Path) -> str:
    """sha256 over the names and bytes of the text files under ``folder`` (not the binarized
    files: fairseq's format is not the data's)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if path.suffix in (".bin", ".idx"):
            continue
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def test_the_translation_tables_data_is_unchanged(table6_data):
    table = "relu_former_table6"  # its data built once, as the table's runs build it
    now = text_hash(data_folder(table6_data) / "raw")
    assert now == EXPECTED[table], CHANGED.format(table=table, now=now)


def test_the_summary_tables_data_is_unchanged(table7_data):
    table = "pyramidion_table7"  # its data built once, as the table's runs build it
    now = text_hash(data_folder(table7_data) / "raw")
    assert now == EXPECTED[table], CHANGED.format(table=table, now=now)
