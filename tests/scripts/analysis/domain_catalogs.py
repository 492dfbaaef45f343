"""Fixture gettext catalogs for the classification corpus: a few "programs" (domains), each
with its own vocabulary, in two languages, plus the cases the builder must handle."""

from __future__ import annotations

import itertools
from pathlib import Path

from catalog_fixtures import write_mo

# domain -> (nouns, verbs): messages of a domain are built from its own words, so a small
# classifier can tell the domains apart
DOMAINS = {
    "netutil": (["socket", "route", "packet", "host", "interface", "gateway"],
                ["resolve", "bind", "ping", "close"]),
    "imgview": (["picture", "thumbnail", "palette", "canvas", "layer", "brush"],
                ["crop", "rotate", "zoom", "paint"]),
    "dbtool": (["table", "index", "schema", "column", "query", "tuple"],
               ["vacuum", "analyze", "drop", "insert"]),
    "pkgmgr": (["package", "repository", "mirror", "archive", "release", "signature"],
               ["install", "remove", "verify", "download"]),
}
TEMPLATES = ["could not {verb} the {noun}", "{verb} this {noun} now?",
             "the {noun} failed to {verb}"]
SHARED = "Cancel the operation"  # in two domains: no single answer, dropped
TINY_DOMAIN = ("tinytool", [("Show the tiny version", "Zeige die winzige Version")])


def domain_messages(domain: str) -> list[tuple[str, str]]:
    """The (English, "translation") messages of one domain, in a fixed order."""
    nouns, verbs = DOMAINS[domain]
    return [(template.format(verb=verb, noun=noun).capitalize(),
             f"[{domain}] " + template.format(verb=verb, noun=noun))
            for template, noun, verb in itertools.product(TEMPLATES, nouns, verbs)]


def write_domain_catalogs(locale_dir: Path) -> Path:
    """``de`` holds every domain's first 60 messages, ``fr`` the rest (and a few again)."""
    locale_dir = Path(locale_dir)
    for domain in DOMAINS:
        messages = domain_messages(domain)
        extra = [(SHARED, "Abbrechen")] if domain in ("netutil", "dbtool") else []
        if domain == "imgview":  # a GTK accelerator, and a message with no words
            extra += [("_Open the picture", "Bild ö_ffnen"), ("%s: %d", "%s: %d")]
        write_mo(locale_dir / "de" / "LC_MESSAGES" / f"{domain}.mo", messages[:60] + extra)
        write_mo(locale_dir / "fr" / "LC_MESSAGES" / f"{domain}.mo", messages[55:])
    name, messages = TINY_DOMAIN
    write_mo(locale_dir / "de" / "LC_MESSAGES" / f"{name}.mo", messages)
    return locale_dir
