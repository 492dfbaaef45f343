"""A German-English parallel corpus from the GNU gettext catalogs installed on this machine.

Every ``<locale-dir>/<lang>/LC_MESSAGES/*.mo`` file holds human translations of a program's
messages (English ``msgid``, translated ``msgstr``): a real, offline parallel corpus (~71k
German-English pairs on the development machine), cleaned, de-duplicated and split by a hash
of the English text, so a sentence never sits in train and test.

    python -m scripts.common.gettext_corpus --out corpus/     # de -> en from /usr/share/locale
    python -m scripts.common.gettext_corpus --locale-dir fixtures/ --lang fr --out corpus/

writes ``{train,valid,test}.{de,en}`` plus ``{split}.catalog`` (the catalog each line came
from, in catalog order, so consecutive lines can be packed into documents).
"""

from __future__ import annotations

import hashlib
import re
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from scripts.common.corpus_splits import (
    add_split_args,
    build_and_write,
    check_split_args,
    corpus_parser,
    hash_subset,
    write_split_columns,
)

DEFAULT_LOCALE_DIR = "/usr/share/locale"
MO_MAGIC = 0x950412DE
SPLITS = ("train", "valid", "test")


class CatalogError(ValueError):
    """A file is not a readable .mo catalog."""


@dataclass(frozen=True)
class Message:
    """One entry of a catalog: English original and its translation (singular forms)."""

    msgid: str
    msgstr: str
    context: str | None = None


@dataclass(frozen=True)
class Pair:
    """One cleaned sentence pair and the catalog it came from."""

    source: str  # the translation (e.g. German)
    target: str  # the English original
    catalog: str


def _charset(header: bytes) -> str:
    match = re.search(rb"charset=([A-Za-z0-9_.:-]+)", header)
    if not match:
        return "utf-8"
    name = match.group(1).decode("ascii").lower()
    return "utf-8" if name in ("charset", "") else name


def read_mo(path: Path) -> List[Message]:
    """A GNU ``.mo`` file's messages (singular forms), decoded with its declared charset."""
    data = Path(path).read_bytes()
    if len(data) < 28:
        raise CatalogError(f"{path}: too short to be a .mo catalog")
    for order in ("<", ">"):
        if struct.unpack(order + "I", data[:4])[0] == MO_MAGIC:
            break
    else:
        raise CatalogError(f"{path}: bad magic number, not a GNU .mo catalog")
    _, count, originals_at, translations_at = struct.unpack(order + "4I", data[4:20])

    def entry(table: int, index: int) -> bytes:
        length, offset = struct.unpack(order + "2I", data[table + 8 * index: table + 8 * index + 8])
        if offset + length > len(data):
            raise CatalogError(f"{path}: string {index} points past the end of the file")
        return data[offset: offset + length]

    raw = [(entry(originals_at, i), entry(translations_at, i)) for i in range(count)]
    charset = "utf-8"
    for original, translation in raw:
        if original == b"":
            charset = _charset(translation)
    messages = []
    for original, translation in raw:
        if original == b"":
            continue
        context = None
        if b"\x04" in original:
            ctx, original = original.split(b"\x04", 1)
            context = ctx.decode(charset, errors="replace")
        msgid = original.split(b"\x00")[0].decode(charset, errors="replace")
        msgstr = translation.split(b"\x00")[0].decode(charset, errors="replace")
        messages.append(Message(msgid, msgstr, context))
    return messages


# An accelerator marks the key of a menu entry: GTK writes "_File" or "Ö_ffnen", Qt "&Open".
_AMPERSAND = re.compile(r"(?<!\w)&(?=\w)")
_LETTER = re.compile(r"[^\W\d_]")
_FORMAT = re.compile(r"%[-+ #0-9.*]*[a-zA-Z]|%\([^)]*\)[a-z]|\{[^}]*\}|\$\{?\w+\}?")


def clean_text(text: str) -> str:
    """Drop Qt-style ``&`` accelerators and collapse whitespace (messages are hard-wrapped)."""
    return " ".join(_AMPERSAND.sub("", text).split())


def _drop_underscore(text: str, other: str) -> str:
    if text.count("_") != 1:
        return text
    word = next(w for w in text.split() if "_" in w)
    # An identifier (LC_CTYPE, --foo_bar) is copied into the translation; a GTK accelerator
    # sits in a word the other side does not have.
    return text if word in other.split() else text.replace("_", "", 1)


def strip_accelerators(source: str, target: str) -> Tuple[str, str]:
    """Remove a single GTK ``_`` accelerator from each side, keeping shared identifiers."""
    return _drop_underscore(source, target), _drop_underscore(target, source)


def message_lines(message: Message) -> List[Tuple[str, str]]:
    """The cleaned (translation, English) pairs of a message: line by line where both sides
    have the same number of lines (help texts), else one pair."""
    src_lines = [line for line in message.msgstr.split("\n") if line.strip()]
    tgt_lines = [line for line in message.msgid.split("\n") if line.strip()]
    if not (len(src_lines) > 1 and len(src_lines) == len(tgt_lines)):
        src_lines, tgt_lines = [message.msgstr], [message.msgid]
    return [strip_accelerators(clean_text(s), clean_text(t))
            for s, t in zip(src_lines, tgt_lines)]


def has_words(text: str) -> bool:
    """Whether a message has something to translate: two letters outside format directives."""
    return len(_LETTER.findall(_FORMAT.sub("", text))) >= 2


def keep_pair(source: str, target: str, max_tokens: int, max_ratio: float) -> bool:
    """Whether a pair is a usable sentence pair: words on both sides, sane lengths, translated."""
    if not source or not target or source == target:
        return False
    # A message that is only a format string ("%s: %s") has nothing to translate.
    if not (has_words(source) and has_words(target)):
        return False
    n_src, n_tgt = len(source.split()), len(target.split())
    if max(n_src, n_tgt) > max_tokens:
        return False
    return max(n_src, n_tgt) <= max_ratio * min(n_src, n_tgt) + 2


def catalog_files(locale_dir: Path, lang: str) -> List[Path]:
    """The ``.mo`` files of one language, sorted by name (the deterministic reading order)."""
    return sorted((Path(locale_dir) / lang / "LC_MESSAGES").glob("*.mo"))


def split_of(target: str, valid_per_mille: int, test_per_mille: int) -> str:
    """Split by a hash of the normalised English text: stable, and no train/test overlap."""
    bucket = int(hashlib.sha1(target.lower().encode("utf-8")).hexdigest()[:8], 16) % 1000
    if bucket < test_per_mille:
        return "test"
    if bucket < test_per_mille + valid_per_mille:
        return "valid"
    return "train"


def build_corpus(locale_dir: Path = Path(DEFAULT_LOCALE_DIR), lang: str = "de",
                 max_tokens: int = 50, max_ratio: float = 3.0, valid_per_mille: int = 15,
                 test_per_mille: int = 15, max_train: int | None = None,
                 log=None) -> Dict[str, List[Pair]]:
    """Every catalog of ``lang`` read, cleaned, de-duplicated (first in catalog order) and
    split; ``max_train`` keeps a hash-chosen subset of train. ``FileNotFoundError`` when
    there is no catalog for ``lang``."""
    files = catalog_files(locale_dir, lang)
    if not files:
        raise FileNotFoundError(
            f"no gettext catalogs in {Path(locale_dir) / lang / 'LC_MESSAGES'} "
            f"(pass --locale-dir, or install a package with '{lang}' translations)")
    seen_targets, seen_sources = set(), set()
    splits: Dict[str, List[Pair]] = {name: [] for name in SPLITS}
    for path in files:
        try:
            messages = read_mo(path)
        except CatalogError as error:
            if log:
                log(f"skipping {error}")
            continue
        for message in messages:
            for source, target in message_lines(message):
                if not keep_pair(source, target, max_tokens, max_ratio):
                    continue
                key_t, key_s = target.lower(), source.lower()
                if key_t in seen_targets or key_s in seen_sources:
                    continue
                seen_targets.add(key_t)
                seen_sources.add(key_s)
                split = split_of(target, valid_per_mille, test_per_mille)
                splits[split].append(Pair(source, target, path.stem))
    splits["train"] = hash_subset(splits["train"], lambda p: p.target, max_train)
    return splits


def write_corpus(splits: Dict[str, Sequence[Pair]], out: Path, src: str = "de",
                 tgt: str = "en") -> Path:
    """Write ``{split}.{src}``, ``{split}.{tgt}`` and ``{split}.catalog`` under ``out``."""
    return write_split_columns(out, splits, {src: lambda p: p.source, tgt: lambda p: p.target,
                                             "catalog": lambda p: p.catalog})


def main(argv: Sequence[str] | None = None) -> int:
    parser = corpus_parser(__doc__, "{train,valid,test}.{LANG,en,catalog}")
    parser.add_argument("--locale-dir", type=Path, default=Path(DEFAULT_LOCALE_DIR),
                        help="folder holding <lang>/LC_MESSAGES/*.mo (default: %(default)s)")
    parser.add_argument("--lang", default="de",
                        help="catalog language, the source side (default: %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=50,
                        help="drop pairs with a side longer than this many words (default: 50)")
    parser.add_argument("--max-ratio", type=float, default=3.0,
                        help="drop pairs whose word counts differ by more than this factor "
                             "(+2 words of slack; default: 3)")
    add_split_args(parser, "pairs", valid=15, test=15, max_train=True)
    args = parser.parse_args(argv)
    check_split_args(parser, args)
    return build_and_write(
        lambda: build_corpus(args.locale_dir, args.lang, args.max_tokens, args.max_ratio,
                             args.valid_per_mille, args.test_per_mille, args.max_train,
                             log=lambda m: print(m, file=sys.stderr)),
        lambda splits: write_corpus(splits, args.out, src=args.lang, tgt="en"),
        lambda sizes: f"{len(catalog_files(args.locale_dir, args.lang))} catalogs -> {sizes} "
                      f"pairs in {args.out}")

if __name__ == "__main__":
    sys.exit(main())
