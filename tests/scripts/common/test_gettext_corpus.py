"""The gettext corpus: .mo reading (checked against Python's gettext), cleaning, splits."""

from __future__ import annotations

import gettext
import struct
from pathlib import Path

import pytest

from scripts.common.gettext_corpus import (
    MO_MAGIC,
    CatalogError,
    Message,
    build_corpus,
    clean_text,
    keep_pair,
    main,
    message_lines,
    read_mo,
    split_of,
    strip_accelerators,
)

from catalog_fixtures import template_pairs, write_fixture_catalogs, write_mo

SYSTEM_CATALOG = Path("/usr/share/locale/de/LC_MESSAGES/coreutils.mo")


def gettext_singulars(path: Path) -> dict:
    """msgid -> msgstr (singular form) as Python's own gettext reads the file."""
    with open(path, "rb") as handle:
        catalog = gettext.GNUTranslations(handle)._catalog
    out = {}
    for key, value in catalog.items():
        if isinstance(key, tuple):
            if key[1] == 0:
                out[key[0]] = value
        elif key:
            out[key] = value
    return out


def test_written_catalog_reads_back_as_python_gettext_reads_it(tmp_path):
    messages = [("Open the file", "Datei öffnen"), ("Quit", "Beenden"), ("a\nb", "c\nd")]
    path = write_mo(tmp_path / "x.mo", messages)
    ours = {m.msgid: m.msgstr for m in read_mo(path)}
    assert ours == gettext_singulars(path) == dict(messages)


@pytest.mark.skipif(not SYSTEM_CATALOG.is_file(), reason="no system de catalog")
def test_system_catalog_matches_python_gettext():
    ours = {m.msgid: m.msgstr for m in read_mo(SYSTEM_CATALOG) if m.context is None}
    reference = gettext_singulars(SYSTEM_CATALOG)
    assert len(ours) > 100
    assert ours == {k: v for k, v in reference.items() if "\x04" not in k}


def test_plural_context_big_endian_and_latin1(tmp_path):
    # a big-endian catalog, written by hand: header (latin-1), a plural and a context entry
    entries = sorted([
        (b"", b"Content-Type: text/plain; charset=ISO-8859-1\n"),
        (b"one key\x00%d keys", "ein Schlüssel\x00%d Schlüssel".encode("latin-1")),
        (b"menu\x04File", b"Datei"),
    ])
    n = len(entries)
    strings_at = 28 + 16 * n
    blob, tables = b"", [b"", b""]
    for column in (0, 1):
        for entry in entries:
            tables[column] += struct.pack(">2I", len(entry[column]), strings_at + len(blob))
            blob += entry[column] + b"\x00"
    head = struct.pack(">7I", MO_MAGIC, 0, n, 28, 28 + 8 * n, 0, 0)
    path = tmp_path / "be.mo"
    path.write_bytes(head + tables[0] + tables[1] + blob)
    messages = {m.msgid: m for m in read_mo(path)}
    assert messages["one key"] == Message("one key", "ein Schlüssel")
    assert messages["File"] == Message("File", "Datei", context="menu")


def test_bad_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.mo"
    bad.write_bytes(b"\x00" * 40)
    with pytest.raises(CatalogError, match="bad.mo: bad magic"):
        read_mo(bad)


def test_accelerators_are_removed_identifiers_kept():
    assert clean_text("&Quit") == "Quit"
    assert clean_text("Drag & Drop\n  now") == "Drag & Drop now"
    assert strip_accelerators("Ö_ffnen", "_Open") == ("Öffnen", "Open")
    assert strip_accelerators("Speichern _unter", "Save _As") == ("Speichern unter", "Save As")
    assert strip_accelerators("LC_CTYPE setzen", "set LC_CTYPE") == ("LC_CTYPE setzen",
                                                                     "set LC_CTYPE")
    assert strip_accelerators("a_b und c_d", "a_b") == ("a_b und c_d", "a_b")  # two: unclear


def test_multiline_messages_pair_line_by_line_when_they_can():
    same = Message("Usage: ls\nList _files.", "Aufruf: ls\nDateien a_uflisten.")
    assert message_lines(same) == [("Aufruf: ls", "Usage: ls"),
                                   ("Dateien auflisten.", "List files.")]
    rewrapped = Message("one\ntwo\nthree", "eins zwei\ndrei")
    assert message_lines(rewrapped) == [("eins zwei drei", "one two three")]


def test_keep_pair_filters():
    assert keep_pair("Datei öffnen", "Open file", 50, 3.0)
    assert not keep_pair("%s: %s", "%s: %s", 50, 3.0)  # format only
    assert not keep_pair("Linux", "Linux", 50, 3.0)  # untranslated
    assert not keep_pair("a " * 60, "b " * 60, 50, 3.0)  # too long
    assert not keep_pair("eins", "one two three four five six", 50, 3.0)  # ratio 6 > 3 + 2


def test_corpus_dedups_cleans_and_splits_by_english_text(tmp_path):
    locale = write_fixture_catalogs(tmp_path / "locale")
    splits = build_corpus(locale, "de", valid_per_mille=100, test_per_mille=100)
    pairs = [p for split in splits.values() for p in split]
    targets = [p.target for p in pairs]
    assert len(targets) == len(set(targets))  # the 5 repeated messages are kept once
    # format-only and untranslated noise is dropped; accelerators are cleaned, not dropped
    assert set(targets) == {en for en, _ in template_pairs()} | {"Open", "Save"}
    assert {"Öffnen", "Speichern"} <= {p.source for p in pairs}
    assert {p.catalog for p in pairs} == {"app", "tool"}
    assert all(split_of(p.target, 100, 100) == name
               for name, split in splits.items() for p in split)
    assert all(len(split) > 10 for split in splits.values())
    # a pair's split does not depend on the other catalogs
    only_app = tmp_path / "only_app"
    (only_app / "de" / "LC_MESSAGES").mkdir(parents=True)
    (locale / "de" / "LC_MESSAGES" / "app.mo").rename(only_app / "de/LC_MESSAGES/app.mo")
    alone = build_corpus(only_app, "de", valid_per_mille=100, test_per_mille=100)
    where = {p.target: name for name, split in splits.items() for p in split}
    assert all(where[p.target] == name for name, split in alone.items() for p in split)


def test_max_train_keeps_a_subset(tmp_path):
    locale = write_fixture_catalogs(tmp_path / "locale")
    full = build_corpus(locale, "de")
    small = build_corpus(locale, "de", max_train=50)
    assert len(small["train"]) == 50
    assert set(small["train"]) <= set(full["train"])
    assert small["test"] == full["test"]


def test_missing_catalogs_name_the_folder(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "fr" / "LC_MESSAGES")):
        build_corpus(tmp_path, "fr")
    assert main(["--locale-dir", str(tmp_path), "--lang", "fr", "--out", str(tmp_path / "o")]) == 2
    assert "no gettext catalogs" in capsys.readouterr().err


def test_cli_writes_parallel_files(tmp_path, capsys):
    locale = write_fixture_catalogs(tmp_path / "locale")
    out = tmp_path / "corpus"
    assert main(["--locale-dir", str(locale), "--out", str(out), "--test-per-mille", "100"]) == 0
    for split in ("train", "valid", "test"):
        lengths = {len((out / f"{split}.{ext}").read_text().splitlines())
                   for ext in ("de", "en", "catalog")}
        assert len(lengths) == 1 and lengths.pop() > 0
    assert "2 catalogs" in capsys.readouterr().out
