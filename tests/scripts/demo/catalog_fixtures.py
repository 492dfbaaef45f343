"""A small German-English gettext fixture: real ``.mo`` files for the corpus and demo tests.

Messages are built from templates ("Could not open the file" / "Konnte Datei nicht öffnen")
so that a tiny model has something to learn; a few entries exercise the reader's cleaning
(accelerators, format-only strings, untranslated copies, duplicates).
"""

from __future__ import annotations

import itertools
from pathlib import Path

from scripts.demo.gettext_corpus import write_mo

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
