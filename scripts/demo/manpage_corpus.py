"""A long-input summarization corpus from the manual pages installed on this machine.

Every page under ``<man-dir>/man<section>/`` (gzip'd or plain roff, the ``man(7)`` macros)
opens with a NAME line, ``ls \\- list directory contents``: the page's own one-line summary.
The rest of the page (synopsis, description, options, ...) is a long document written by the
same authors. Read together they are an offline summarization task: the page body is the
input, its NAME description the summary. ``man`` and ``groff`` are not needed: this module
reads the roff source itself (requests, font and size escapes, special characters, macro
definitions and conditionals are removed; text macros such as ``.B``/``.IR`` keep their
words). Pages in the BSD ``mdoc`` macros, ``.so`` links, and pages without a NAME line are
skipped and counted.

Cleaning: the NAME section is cut from the input (it holds the answer); whitespace is
collapsed; pages whose description is empty, over-long or a copy of the command name, and
pages with too little text, are dropped; each description is kept once (the first page in
path order), which also folds the near-identical variants of one command (alpha/beta/GA
releases, aliases) into one document. The split depends only on a hash of the description,
so no summary is ever both in train and test and adding pages moves nothing.

    python -m scripts.demo.manpage_corpus --out corpus/      # from /usr/share/man
    python -m scripts.demo.manpage_corpus --man-dir fixtures/man --out corpus/

writes ``{train,valid,test}.{doc,sum,page}``: the page body, its summary, and the page's
file name, one line each.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import re
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Sequence

from scripts.common import corpus_splits as splits_io
from scripts.common.gettext_corpus import SPLITS, split_of

DEFAULT_MAN_DIR = "/usr/share/man"
DEFAULT_SECTIONS = ("1", "2", "3", "4", "5", "6", "7", "8")


class ManPageError(ValueError):
    """A file is not a man(7) page this reader can use."""


@dataclass(frozen=True)
class Document:
    """One page: its body text, its NAME description and where it came from."""

    text: str
    summary: str
    page: str


# ----------------------------------------------------------------------------- roff

# Named characters (\(xx, \[xxx]) that carry meaning in prose; any other is dropped.
_SPECIAL = {
    "aq": "'", "dq": '"', "lq": '"', "rq": '"', "oq": "'", "cq": "'", "em": "-", "en": "-",
    "hy": "-", "mi": "-", "pl": "+", "eq": "=", "bu": "*", "co": "(c)", "rg": "(R)",
    "tm": "(TM)", "ga": "`", "ti": "~", "ha": "^", "rs": "\\", "sl": "/", "bv": "|",
    "ba": "|", "or": "|", "lh": "<", "rh": ">", "la": "<", "ra": ">", "<=": "<=", ">=": ">=",
    "!=": "!=", "->": "->", "<-": "<-", "mu": "x", "di": "/", "de": " degrees", "ua": "^",
    "da": "v", "fo": "<", "fc": ">", "Fo": "<<", "Fc": ">>", "ct": "c", "sc": "S",
    "ss": "ss", "a:": "a", "o:": "o", "u:": "u", "A:": "A", "O:": "O", "U:": "U",
    "e'": "e", "'e": "e", "`e": "e", "tno": "~", "at": "@", "sh": "#", "Do": "$",
    "ul": "_", "nbsp": " ",
}
_ESCAPE = re.compile(
    r"\\(?:"
    r"\"(?P<comment>.*)$"                          # \" comment to the end of the line
    r"|\((?P<special2>..)"                         # \(xx
    r"|\[(?P<special>[^\]]*)\]"                    # \[name]
    r"|\*(?:\((?P<string2>..)|\[(?P<string>[^\]]*)\]|(?P<string1>.))"  # \*x \*(xx \*[name]
    r"|[fFn](?:\(..|\[[^\]]*\]|.)"                 # fonts, number registers
    r"|s[-+]?(?:\d\d?|\(\d\d|\[[^\]]*\])"           # sizes \s-1 \s0 \s(12
    r"|[hvwlLDoxbXZRNkCSHzAB]'[^']*'"              # \h'..' \w'..' and other quoted escapes
    r"|[hvwlLDoxbXZRNkCSHzAB]\[[^\]]*\]"
    r"|(?P<char>.)"                                # one-character escapes
    r")")
_ONE_CHAR = {"-": "-", "e": "\\", "\\": "\\", " ": " ", "~": " ", "0": " ", "t": " ",
             "'": "'", "`": "`", ".": ".", "_": "_", "|": "", "^": "", "&": "", "%": "",
             "c": "", ":": "", "/": "", ",": "", "!": "", "}": "", "{": "", "p": "", "a": "",
             "r": "", "d": "", "u": "", "E": ""}
_STRINGS = {"lq": '"', "rq": '"', "R": "(R)", "Tm": "(TM)", "aq": "'"}


def _replace_escape(match: re.Match) -> str:
    if match.group("comment") is not None:
        return ""
    name = match.group("special2") or match.group("special")
    if name is not None:
        if name.startswith("u") and re.fullmatch(r"u[0-9A-Fa-f]{4,6}", name):
            return chr(int(name[1:], 16))
        return _SPECIAL.get(name, "")
    name = match.group("string2") or match.group("string") or match.group("string1")
    if name is not None:
        return _STRINGS.get(name, "")
    char = match.group("char")
    if char is not None:
        return _ONE_CHAR.get(char, char)
    return ""


def unescape(text: str) -> str:
    """Roff text with escapes resolved: fonts and sizes dropped, ``\\-`` a hyphen, and so on."""
    return _ESCAPE.sub(_replace_escape, text)


def _macro_arguments(rest: str) -> List[str]:
    """Split a request's arguments the roff way: spaces separate, double quotes group."""
    found = re.findall(r'"(?:[^"]|"")*"?|(?:\\.|[^\s\\])+\\?', rest)
    return [unescape(a[1:].removesuffix('"').replace('""', '"') if a.startswith('"') else a)
            for a in found]


# Macros whose arguments are text to keep: fonts (joined without spaces when alternating).
_FONT_MACROS = {"B", "I", "SM", "SB", "UR", "MT"}
_ALTERNATING = {"BR", "RB", "BI", "IB", "IR", "RI"}

def roff_sections(source: str) -> List[tuple]:
    """The page as ``[(SECTION TITLE, text), ...]`` in order, from man(7) roff source.

    Raises ``ManPageError`` for ``.so`` links and BSD ``mdoc`` pages (``.Dd``/``.Sh``).
    """
    sections: List[tuple] = []
    title, lines = "", []
    skip_until = None  # the end of a macro definition or an .ig block
    table = None  # None outside tbl; "format" in its layout lines; "data" in its rows

    def flush() -> None:
        text = " ".join(" ".join(lines).split())
        if text or title:
            sections.append((title, text))

    for raw in source.splitlines():
        line = raw.rstrip()
        if skip_until is not None:
            if line.strip() == skip_until:
                skip_until = None
            continue
        if not line.startswith((".", "'")):
            if table == "format":
                # options and layout lines ("allbox;", "l l.") up to the one ending in "."
                if line.endswith("."):
                    table = "data"
                continue
            lines.append(unescape(line.replace("\t", " ") if table else line))
            continue
        match = re.match(r"^[.'][ \t]*([^ \t]*)[ \t]*(.*)$", line)
        name, rest = match.group(1), match.group(2)
        if name == "so":
            raise ManPageError(f"a link to {rest.strip()} (.so)")
        if name in ("Dd", "Sh", "Nd"):
            raise ManPageError("written in the BSD mdoc macros, not man(7)")
        if name in ("de", "de1", "am", "ig"):
            skip_until = ".." if name != "ig" or not rest.strip() else "." + rest.split()[0]
            continue
        if name in ("TS", "TE"):
            table = "format" if name == "TS" else None
            continue
        if name == "SH":
            flush()
            arguments = _macro_arguments(rest)
            title, lines = " ".join(arguments).strip().upper(), []
            continue
        if name in _FONT_MACROS or name == "SS":
            lines.append(" ".join(_macro_arguments(rest)))
        elif name in _ALTERNATING:
            lines.append("".join(_macro_arguments(rest)))
        elif name in ("IP", "TP", "HP"):
            arguments = _macro_arguments(rest)
            if name == "IP" and arguments:
                lines.append(arguments[0])
        # every other request (.TH, .PP, .if, .nr, .ds, .ft, ...) carries no prose
    flush()
    return sections


def read_page_source(path: Path) -> str:
    """A page's roff text, decompressed (gzip, bzip2, xz or plain, by content) and decoded."""
    data = Path(path).read_bytes()
    for magic, decompress in ((b"\x1f\x8b", gzip.decompress), (b"BZh", bz2.decompress),
                              (b"\xfd7zXZ", lzma.decompress)):
        if data.startswith(magic):
            data = decompress(data)
            break
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


_NAME_DASH = re.compile(r"\s(?:-{1,2}|\u2013|\u2014)\s")


def parse_page(path: Path, source: str | None = None) -> Document:
    """The body text and NAME description of one page; ``ManPageError`` if it has none."""
    sections = roff_sections(read_page_source(path) if source is None else source)
    names = [text for title, text in sections if title in ("NAME", "NOMBRE", "NOM")]
    if not names or not names[0]:
        raise ManPageError("no NAME section")
    parts = _NAME_DASH.split(names[0], maxsplit=1)
    if len(parts) != 2:
        raise ManPageError(f"NAME line without ' - ': {names[0][:80]!r}")
    commands, summary = parts[0].strip(), parts[1].strip()
    body = " ".join(f"{title.lower()}: {text}" if title else text
                    for title, text in sections if title not in ("NAME", "NOMBRE", "NOM")
                    and text)
    if not commands:
        raise ManPageError("NAME line without a command name")
    return Document(" ".join(body.split()), " ".join(summary.split()), _page_name(path))


def _page_name(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".bz2", ".xz"):
        name = name.removesuffix(suffix)
    return name


# ----------------------------------------------------------------------------- corpus

def page_files(man_dir: Path, sections: Sequence[str] = DEFAULT_SECTIONS) -> List[Path]:
    """Every page file of the given sections (``man1``, ``man3``, ...), sorted by path."""
    files: List[Path] = []
    for section in sections:
        folder = Path(man_dir) / f"man{section}"
        if folder.is_dir():
            files += [p for p in folder.iterdir() if p.is_file() and not p.is_symlink()]
    return sorted(files)


def keep_document(doc: Document, min_words: int, max_summary_words: int) -> bool:
    """Drop pages that do not make a summarization example."""
    words = doc.summary.split()
    if not words or len(words) > max_summary_words:
        return False
    if not re.search(r"[A-Za-z]{3}", doc.summary):
        return False
    if doc.summary.lower().strip(". ") == doc.page.split(".")[0].lower():
        return False
    return len(doc.text.split()) >= min_words


def build_corpus(man_dir: Path = Path(DEFAULT_MAN_DIR), *,
                 sections: Sequence[str] = DEFAULT_SECTIONS, min_words: int = 200,
                 max_summary_words: int = 30, valid_per_mille: int = 40,
                 test_per_mille: int = 40, max_train: int | None = None, lowercase: bool = True,
                 log=None) -> Dict[str, List[Document]]:
    """Read, clean, de-duplicate and split every page under ``man_dir``.

    Raises ``FileNotFoundError`` when there is no page at all; ``log`` (if given) receives
    progress and the count of skipped pages by reason.
    """
    files = page_files(man_dir, sections)
    if not files:
        raise FileNotFoundError(
            f"no manual pages under {Path(man_dir)}/man{{{','.join(sections)}}} (pass "
            "--man-dir, or install the man pages: on Debian, remove the path-exclude of "
            "/usr/share/man from /etc/dpkg/dpkg.cfg.d/ and reinstall the packages)")
    skipped: Dict[str, int] = {}
    seen = set()
    splits: Dict[str, List[Document]] = {name: [] for name in SPLITS}
    for i, path in enumerate(files):
        if log and i and i % 5000 == 0:
            log(f"  read {i}/{len(files)} pages")
        try:
            doc = parse_page(path)
        except (ManPageError, OSError, EOFError, lzma.LZMAError, zlib.error,
                ValueError) as error:
            reason = str(error) if isinstance(error, ManPageError) else "unreadable"
            reason = re.sub(r" to \S+ \(\.so\)$", " (.so)", reason)
            reason = "NAME line without ' - '" if reason.startswith("NAME line") else reason
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        if lowercase:
            doc = Document(doc.text.lower(), doc.summary.lower(), doc.page)
        if not keep_document(doc, min_words, max_summary_words):
            skipped["too short or no usable summary"] = skipped.get(
                "too short or no usable summary", 0) + 1
            continue
        key = doc.summary.lower().strip(" .")
        if key in seen:
            skipped["same summary as an earlier page"] = skipped.get(
                "same summary as an earlier page", 0) + 1
            continue
        seen.add(key)
        splits[split_of(key, valid_per_mille, test_per_mille)].append(doc)
    splits["train"] = splits_io.hash_subset(splits["train"], lambda d: d.summary, max_train)
    if log:
        log(f"  {len(files)} page files; skipped: " + (", ".join(
            f"{n} {reason}" for reason, n in sorted(skipped.items())) or "none"))
    return splits


def write_corpus(splits: Dict[str, Sequence[Document]], out: Path) -> Path:
    """Write ``{split}.doc``, ``{split}.sum`` and ``{split}.page`` under ``out``."""
    columns = {"doc": lambda d: d.text, "sum": lambda d: d.summary, "page": lambda d: d.page}
    return splits_io.write_split_columns(out, splits, columns)


def main(argv: Iterable[str] | None = None) -> int:
    parser = splits_io.corpus_parser(__doc__, "{train,valid,test}.{doc,sum,page}")
    parser.add_argument("--man-dir", type=Path, default=Path(DEFAULT_MAN_DIR),
                        help="folder holding man<section>/ page files (default: %(default)s)")
    parser.add_argument("--sections", default=",".join(DEFAULT_SECTIONS),
                        help="manual sections to read, comma-separated (default: %(default)s)")
    parser.add_argument("--min-words", type=int, default=200,
                        help="drop pages whose body has fewer words (default: %(default)s)")
    parser.add_argument("--max-summary-words", type=int, default=30,
                        help="drop pages whose description is longer (default: %(default)s)")
    splits_io.add_split_args(parser, "pages", valid=40, test=40, max_train=True)
    parser.add_argument("--keep-case", action="store_true", help="do not lower-case the text")
    args = parser.parse_args(argv)
    splits_io.check_split_args(parser, args)
    return splits_io.build_and_write(
        lambda: build_corpus(args.man_dir, sections=args.sections.split(","),
                             min_words=args.min_words, max_summary_words=args.max_summary_words,
                             valid_per_mille=args.valid_per_mille,
                             test_per_mille=args.test_per_mille, max_train=args.max_train,
                             lowercase=not args.keep_case,
                             log=lambda m: print(m, file=sys.stderr)),
        lambda splits: write_corpus(splits, args.out),
        lambda sizes: f"{sizes} documents in {args.out}")

if __name__ == "__main__":
    sys.exit(main())
