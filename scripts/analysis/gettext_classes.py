"""Which program is this message from? A many-class text classification corpus, offline.

Every ``<locale-dir>/<lang>/LC_MESSAGES/<domain>.mo`` catalog holds the English messages
(``msgid``) of one program or library, the *domain*: ``coreutils``, ``git``, ``gtk20``,
``postgres-15`` ... Read together, the catalogs installed on a machine are a real labelled
corpus: the input is an English message, the label the domain it comes from. Messages are
short and written by different projects in different styles, so the task is learnable but
not trivial, and it has as many classes as the machine has domains (90 domains on the
development machine; 75 classes survive the cleaning below).

Building it:

1. Read every catalog of the chosen languages (all by default: a catalog only holds the
   messages its translators finished, so the union over languages has the most) with
   :func:`scripts.common.gettext_corpus.read_mo`.
2. Clean each English message as the translation corpus does (accelerators ``_File`` and
   ``&Open`` removed, whitespace collapsed), keep it only if it has words outside its format
   directives, and tokenise it (lower case, punctuation split off, at most ``max_tokens``
   tokens).
3. De-duplicate on the tokenised text. A text found in two or more domains (``"Cancel"``,
   ``"out of memory"``, the ISO code lists shipped twice) has no single answer and is dropped.
4. Drop the domains with fewer than ``min_per_class`` messages; keep at most
   ``max_per_class`` per domain (a subset chosen by hash, so the same every time).
5. Split by a hash of the text (``split_of``): stable, and a text can never be in two splits.

    python -m scripts.analysis.gettext_classes --out corpus/         # from /usr/share/locale
    python -m scripts.analysis.gettext_classes --locale-dir fixtures/ --out corpus/

writes ``{train,valid,test}.input0`` (one tokenised message a line), ``{split}.label`` (its
domain) and ``classes.tsv`` (per-domain counts), the layout fairseq's GLUE preprocessing
binarizes for the ``sentence_prediction`` task.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Sequence

from scripts.common.atomic_files import write_text_atomic
from scripts.common.corpus_splits import add_split_args, check_split_args, write_split_columns
from scripts.common.gettext_corpus import (
    DEFAULT_LOCALE_DIR,
    SPLITS,
    CatalogError,
    clean_text,
    has_words,
    read_mo,
    split_of,
    strip_accelerators,
)

_TOKEN = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True)
class Example:
    """One classification example: a tokenised English message and its domain."""

    text: str
    label: str


@dataclass
class CorpusStats:
    """What the builder read and dropped, for its report."""

    catalogs: int = 0
    unreadable: int = 0
    messages: int = 0
    no_words: int = 0
    ambiguous: int = 0
    small_classes: int = 0
    small_class_examples: int = 0
    capped: int = 0


def tokenize(text: str, max_tokens: int) -> str:
    """Lower-cased words and punctuation marks, space separated, at most ``max_tokens``."""
    return " ".join(_TOKEN.findall(text.lower())[:max_tokens])


def english_message(msgid: str, msgstr: str) -> str:
    """The cleaned English side of a message (a GTK ``_`` accelerator is told from an
    identifier by the translation, which copies identifiers but not accelerators)."""
    return strip_accelerators(clean_text(msgstr), clean_text(msgid))[1]


def domain_catalogs(locale_dir: Path, langs: Sequence[str] | None) -> Dict[str, List[Path]]:
    """Every ``.mo`` file under ``locale_dir/<lang>/LC_MESSAGES``, grouped by domain.

    ``langs`` None means every language folder. Files are listed in sorted order.
    """
    locale_dir = Path(locale_dir)
    if langs:
        files = [f for lang in langs for f in (locale_dir / lang / "LC_MESSAGES").glob("*.mo")]
    else:
        files = list(locale_dir.glob("*/LC_MESSAGES/*.mo"))
    domains: Dict[str, List[Path]] = defaultdict(list)
    for path in sorted(files):
        domains[path.stem].append(path)
    return dict(sorted(domains.items()))


def _hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def build_examples(locale_dir: Path = Path(DEFAULT_LOCALE_DIR), langs: Sequence[str] | None = None,
                   max_tokens: int = 32, min_per_class: int = 20,
                   max_per_class: int | None = None, valid_per_mille: int = 100,
                   test_per_mille: int = 100, log: Callable[[str], None] | None = None,
                   ) -> tuple[Dict[str, List[Example]], CorpusStats]:
    """Read, clean, de-duplicate, filter and split the catalogs (steps 1-5 of the module doc).

    Returns the examples of each split (sorted by label, then text) and the statistics.
    Raises ``FileNotFoundError`` naming the folder when it holds no catalog.
    """
    catalogs = domain_catalogs(locale_dir, langs)
    if not catalogs:
        where = Path(locale_dir) / ("{" + ",".join(langs) + "}" if langs else "*") / "LC_MESSAGES"
        raise FileNotFoundError(f"no gettext catalogs (*.mo) in {where}: pass --locale-dir "
                                "(and --lang) pointing at <dir>/<lang>/LC_MESSAGES/*.mo")
    stats = CorpusStats()
    domains_of: Dict[str, set] = defaultdict(set)
    for number, (domain, paths) in enumerate(catalogs.items(), 1):
        for path in paths:
            stats.catalogs += 1
            try:
                messages = read_mo(path)
            except CatalogError as error:
                stats.unreadable += 1
                if log:
                    log(f"skipping {error}")
                continue
            for message in messages:
                stats.messages += 1
                text = english_message(message.msgid, message.msgstr)
                if not has_words(text):
                    stats.no_words += 1
                    continue
                domains_of[tokenize(text, max_tokens)].add(domain)
        if log and (number % 10 == 0 or number == len(catalogs)):
            log(f"read {number}/{len(catalogs)} domains ({stats.catalogs} catalogs), "
                f"{len(domains_of)} distinct messages so far")
    by_label: Dict[str, List[str]] = defaultdict(list)
    for text, found_in in domains_of.items():
        if len(found_in) > 1:
            stats.ambiguous += 1
        else:
            by_label[next(iter(found_in))].append(text)
    splits: Dict[str, List[Example]] = {name: [] for name in SPLITS}
    for label in sorted(by_label):
        texts = by_label[label]
        if len(texts) < min_per_class:
            stats.small_classes += 1
            stats.small_class_examples += len(texts)
            continue
        if max_per_class is not None and len(texts) > max_per_class:
            stats.capped += len(texts) - max_per_class
            texts = sorted(texts, key=_hash)[:max_per_class]
        for text in sorted(texts):
            splits[split_of(text, valid_per_mille, test_per_mille)].append(Example(text, label))
    return splits, stats


def write_examples(splits: Dict[str, Sequence[Example]], out: Path) -> Path:
    """Write ``{split}.input0``, ``{split}.label`` and ``classes.tsv`` under ``out``, each
    through a temporary name and a rename."""
    out = write_split_columns(out, splits, {"input0": lambda e: e.text, "label": lambda e: e.label})
    counts = {split: Counter(e.label for e in examples) for split, examples in splits.items()}
    labels = sorted(set().union(*counts.values()))
    rows = ["label\t" + "\t".join(splits)]
    rows += [label + "\t" + "\t".join(str(counts[s][label]) for s in splits) for label in labels]
    write_text_atomic(out / "classes.tsv", "\n".join(rows) + "\n")
    return out


def describe(splits: Dict[str, Sequence[Example]], stats: CorpusStats) -> str:
    """One paragraph: sizes, classes and what was dropped."""
    labels = {e.label for examples in splits.values() for e in examples}
    sizes = ", ".join(f"{name} {len(examples)}" for name, examples in splits.items())
    return (f"{len(labels)} classes; {sizes} examples (from {stats.messages} messages in "
            f"{stats.catalogs} catalogs: {stats.no_words} without words, {stats.ambiguous} "
            f"distinct texts in several domains dropped, {stats.small_classes} domains below "
            f"the minimum ({stats.small_class_examples} texts) dropped, {stats.capped} over the "
            f"per-class cap left out)")


def add_corpus_arguments(parser: argparse.ArgumentParser,
                         max_per_class: int | None = None) -> None:
    """The corpus flags, shared with ``scripts.analysis.classification``."""
    parser.add_argument("--locale-dir", type=Path, default=Path(DEFAULT_LOCALE_DIR),
                        help="folder holding <lang>/LC_MESSAGES/*.mo (default: %(default)s)")
    parser.add_argument("--lang", action="append", default=None,
                        help="read only this language's catalogs (repeatable; default: all)")
    parser.add_argument("--max-tokens", type=int, default=32,
                        help="keep the first this many tokens of a message (default: 32)")
    parser.add_argument("--min-per-class", type=int, default=20,
                        help="drop domains with fewer distinct messages (default: 20)")
    parser.add_argument("--max-per-class", type=int, default=max_per_class,
                        help="keep at most this many messages per domain, a hash-chosen "
                             f"subset (default: {max_per_class or 'all'}); the corpus-size "
                             "flag")
    add_split_args(parser, "the texts", valid=100, test=100)


def check_corpus_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``parser.error`` (one line, status 2) naming the flag for a value out of range."""
    if args.max_tokens < 1:
        parser.error(f"--max-tokens must be >= 1, got {args.max_tokens}")
    if args.min_per_class < 3:
        parser.error(f"--min-per-class must be >= 3 (a class needs examples in train, valid "
                     f"and test), got {args.min_per_class}")
    if args.max_per_class is not None and args.max_per_class < args.min_per_class:
        parser.error(f"--max-per-class ({args.max_per_class}) must be >= --min-per-class "
                     f"({args.min_per_class})")
    check_split_args(parser, args, minimum=1)


def corpus_from_args(args: argparse.Namespace, out: Path,
                     log: Callable[[str], None]) -> tuple[Dict[str, List[Example]], CorpusStats]:
    """Build and write the corpus the flags of :func:`add_corpus_arguments` describe."""
    splits, stats = build_examples(
        args.locale_dir, args.lang, args.max_tokens, args.min_per_class, args.max_per_class,
        args.valid_per_mille, args.test_per_mille, log=log)
    if not splits["train"]:
        raise FileNotFoundError(
            f"no domain of {args.locale_dir} has --min-per-class {args.min_per_class} usable "
            "messages: lower --min-per-class or add catalogs")
    write_examples(splits, out)
    return splits, stats


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True,
                        help="output folder for {train,valid,test}.{input0,label}, classes.tsv")
    add_corpus_arguments(parser)
    args = parser.parse_args(argv)
    check_corpus_arguments(parser, args)
    try:
        splits, stats = corpus_from_args(args, args.out, _log)
    except FileNotFoundError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    print(f"{args.out}: {describe(splits, stats)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
