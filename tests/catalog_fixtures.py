"""A small German-English gettext fixture: real ``.mo`` files for the corpus, demo and
ablation tests, and ``write_mo``, the writer of such files.

Messages are built from templates ("Could not open the file" / "Konnte Datei nicht öffnen")
so that a tiny model has something to learn; a few entries exercise the reader's cleaning
(accelerators, format-only strings, untranslated copies, duplicates).
"""

from __future__ import annotations

import itertools
import os
import struct
from pathlib import Path
from typing import Iterable, Tuple

from scripts.common.gettext_corpus import MO_MAGIC


def write_mo(path: Path, messages: Iterable[Tuple[str, str]], charset: str = "utf-8") -> Path:
    """Write a minimal little-endian ``.mo`` catalog (the fixtures), with a charset header."""
    header = f"Content-Type: text/plain; charset={charset}\n".encode(charset)
    entries = sorted([(b"", header)] + [(m.encode(charset), s.encode(charset))
                                        for m, s in messages])
    count = len(entries)
    originals_at = 28
    translations_at = originals_at + 8 * count
    strings_at = translations_at + 8 * count
    tables, blob = [b"", b""], b""
    for column in (0, 1):
        for entry in entries:
            tables[column] += struct.pack("<2I", len(entry[column]), strings_at + len(blob))
            blob += entry[column] + b"\x00"
    head = struct.pack("<7I", MO_MAGIC, 0, count, originals_at, translations_at, 0, 0)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(head + tables[0] + tables[1] + blob)
    os.replace(tmp, path)
    return path


NOUNS = [("file", "Datei"), ("folder", "Ordner"), ("window", "Fenster"), ("user", "Benutzer"),
         ("password", "Passwort"), ("key", "Schlüssel"), ("message", "Nachricht"),
         ("network", "Netzwerk"), ("device", "Gerät"), ("printer", "Drucker"),
         ("account", "Konto"), ("picture", "Bild")]
VERBS = [("open", "öffnen"), ("delete", "löschen"), ("save", "speichern"),
         ("create", "erstellen"), ("find", "finden")]

# entries the cleaner must drop or fix: (msgid, msgstr)
NOISE = [("%s: %s", "%s: %s"), ("Linux", "Linux"), ("_Open", "Ö_ffnen"), ("&Save", "&Speichern")]


def template_pairs() -> list[tuple[str, str]]:
    """Every (English, German) message of the fixture, in a fixed order."""
    pairs = []
    for (en_v, de_v), (en_n, de_n) in itertools.product(VERBS, NOUNS):
        pairs.append((f"Could not {en_v} the {en_n}", f"Konnte {de_n} nicht {de_v}"))
        pairs.append((f"{en_v.capitalize()} the {en_n} now", f"{de_n} jetzt {de_v}"))
    for (en_a, de_a), (en_b, de_b) in itertools.permutations(NOUNS, 2):
        for en_v, de_v in VERBS[:2]:
            pairs.append((f"{en_v.capitalize()} the {en_a} and the {en_b}",
                          f"{de_a} und {de_b} {de_v}"))
    return pairs


def write_fixture_catalogs(locale_dir: Path, lang: str = "de") -> Path:
    """Write two catalogs (``app.mo``, ``tool.mo``) under ``locale_dir/lang/LC_MESSAGES``."""
    folder = Path(locale_dir) / lang / "LC_MESSAGES"
    pairs = template_pairs()
    half = len(pairs) // 2
    write_mo(folder / "app.mo", pairs[:half] + NOISE)
    write_mo(folder / "tool.mo", pairs[half:] + pairs[:5])  # duplicates across catalogs
    return Path(locale_dir)
