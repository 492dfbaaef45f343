#!/usr/bin/env python3
"""Text preparation shared by every recipe (and by the demo): a CLI and importable functions.

Run from the repository root as ``python -m scripts.recipes.lib.prepare_text``, or import::

    from scripts.recipes.lib.prepare_text import moses_tokenize, learn_bpe, BpeEncoder

Public functions (all take and return plain ``str`` lines without newlines):

- ``moses_tokenize(lines, lang, *, lowercase=False, aggressive_dash_splits=False,
  normalize_punctuation=False, escape=True, workers=1) -> list[str]``
  Moses tokenisation with ``sacremoses`` (the Perl ``tokenizer.perl`` rules, ``-a`` is
  ``aggressive_dash_splits``); optional Moses punctuation normalisation before and lower-casing
  after.
- ``moses_detokenize(lines, lang) -> list[str]``: the inverse, for SacreBLEU on plain text.
- ``clean_parallel(src, tgt, *, min_len=1, max_len=175, ratio=1.5) -> (list, list)``
  ``clean-corpus-n.perl``'s filter: drops pairs where a side has fewer than ``min_len`` or
  more than ``max_len`` whitespace tokens, or where the longer side exceeds ``ratio`` times
  the shorter.
- ``learn_bpe(files, codes_path, merges, *, min_frequency=2) -> Path``: joint BPE (one code
  table for all files, the ``subword-nmt learn-bpe`` algorithm) written to ``codes_path``.
- ``BpeEncoder(codes_path, glossaries=())``: ``.encode(line) -> str``, ``.encode_lines(lines)``;
  ``apply_bpe(lines, codes_path) -> list[str]`` is the one-call form;
  ``remove_bpe(line) -> str`` undoes it (``@@ `` joins).
- ``train_sentencepiece(files, model_prefix, vocab_size, *, model_type="unigram",
  input_sentence_size=2_000_000) -> Path`` (the ``.model`` file) and
  ``sentencepiece_encode(lines, model_path, *, max_pieces=None) -> list[str]``,
  ``sentencepiece_decode(lines, model_path) -> list[str]``.
- ``pack_documents(documents, max_tokens) -> list[tuple[str, str]]``: consecutive whole
  sentence pairs of each document joined into segments below ``max_tokens`` as G-Transformer
  counts them (``pair_length``: longer side + 2 a pair); a pair that reaches the limit alone
  is a segment of its own, kept whole (``oversized_pairs`` counts them).
- ``split_every(lines, every, offset=0) -> (kept, taken)``: every ``every``-th line goes to
  ``taken`` (fairseq's IWSLT/WMT validation split).

Every CLI sub-command reads and writes UTF-8 files, one sentence a line; see ``--help``.
Output files are written under a temporary name and renamed when complete.
"""

from __future__ import annotations

import argparse
import io
import itertools
import os
import sys
from multiprocessing import Pool
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

BPE_SEPARATOR = "@@"
CURLY_APOSTROPHE = "\u2019"


# ---------------------------------------------------------------------------- file helpers
def read_lines(path: str | Path) -> list[str]:
    """All lines of a UTF-8 file without their line ends ("-" reads stdin)."""
    if str(path) == "-":
        return [line.rstrip("\n") for line in sys.stdin]
    with open(path, encoding="utf-8", newline="\n") as f:
        return [line.rstrip("\r\n") for line in f]


def write_lines(path: str | Path, lines: Iterable[str]) -> int:
    """Write lines atomically (temporary name, then rename); "-" writes stdout. Returns count."""
    count = 0
    if str(path) == "-":
        for line in lines:
            sys.stdout.write(line + "\n")
            count += 1
        return count
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            for line in lines:
                f.write(line + "\n")
                count += 1
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return count


# ---------------------------------------------------------------------------- Moses
_TOKENIZERS: dict = {}


def _moses(lang: str):
    from sacremoses import MosesDetokenizer, MosesPunctNormalizer, MosesTokenizer

    if lang not in _TOKENIZERS:
        _TOKENIZERS[lang] = (
            MosesTokenizer(lang=lang), MosesDetokenizer(lang=lang),
            # normalize-punctuation.perl followed by remove-non-printing-char.perl
            MosesPunctNormalizer(lang=lang, post_remove_control_chars=True),
        )
    return _TOKENIZERS[lang]


def _tokenize_chunk(args: tuple) -> list[str]:
    lines, lang, lowercase, aggressive, normalize, escape, straight = args
    tokenizer, _, normalizer = _moses(lang)
    out = []
    for line in lines:
        if straight:
            line = line.replace(CURLY_APOSTROPHE, "'")
        if normalize:
            line = normalizer.normalize(line)
        text = tokenizer.tokenize(
            line.strip(), aggressive_dash_splits=aggressive, return_str=True, escape=escape
        )
        out.append(text.lower() if lowercase else text)
    return out


def moses_tokenize(lines: Sequence[str], lang: str, *, lowercase: bool = False,
                   aggressive_dash_splits: bool = False, normalize_punctuation: bool = False,
                   escape: bool = True, straight_apostrophes: bool = False,
                   workers: int = 1) -> list[str]:
    """Moses-tokenise ``lines`` (``tokenizer.perl -l lang [-a]``), optionally lower-cased.

    ``straight_apostrophes`` first maps the right single quotation mark U+2019 to ``'``, the
    one character fairseq's ``prepare-iwslt14.sh`` and ``prepare-wmt14en2de.sh`` map in their
    test sets (``sed -e "s/\\’/\\'/g"``).
    """
    lines = list(lines)
    options = (lang, lowercase, aggressive_dash_splits, normalize_punctuation, escape,
               straight_apostrophes)
    if workers <= 1 or len(lines) < 2000:
        return _tokenize_chunk((lines, *options))
    size = (len(lines) + workers * 4 - 1) // (workers * 4)
    chunks = [(lines[i:i + size], *options) for i in range(0, len(lines), size)]
    with Pool(workers) as pool:
        return list(itertools.chain.from_iterable(pool.map(_tokenize_chunk, chunks)))


def moses_detokenize(lines: Sequence[str], lang: str) -> list[str]:
    """Undo Moses tokenisation (and its XML escapes), for scoring plain text."""
    _, detokenizer, _ = _moses(lang)
    return [detokenizer.detokenize(line.split(), return_str=True) for line in lines]


# ---------------------------------------------------------------------------- cleaning, splits
def clean_parallel(src: Sequence[str], tgt: Sequence[str], *, min_len: int = 1,
                   max_len: int = 175, ratio: float = 1.5) -> tuple[list[str], list[str]]:
    """Keep the pairs ``clean-corpus-n.perl -ratio R L1 L2 min max`` keeps."""
    if len(src) != len(tgt):
        raise ValueError(f"parallel sides differ in length: {len(src)} vs {len(tgt)} lines")
    kept_src, kept_tgt = [], []
    for s, t in zip(src, tgt):
        ns, nt = len(s.split()), len(t.split())
        if not (min_len <= ns <= max_len and min_len <= nt <= max_len):
            continue
        if ns / nt > ratio or nt / ns > ratio:
            continue
        kept_src.append(s)
        kept_tgt.append(t)
    return kept_src, kept_tgt


# ---------------------------------------------------------------------------- BPE
def learn_bpe(files: Sequence[str | Path], codes_path: str | Path, merges: int, *,
              min_frequency: int = 2) -> Path:
    """Learn ``merges`` joint BPE operations on the concatenation of ``files``."""
    from subword_nmt.learn_bpe import learn_bpe as _learn

    def all_lines() -> Iterator[str]:
        for name in files:
            with open(name, encoding="utf-8") as f:
                yield from f

    codes_path = Path(codes_path)
    tmp = codes_path.with_name(f".{codes_path.name}.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as out:
        _learn(all_lines(), out, merges, min_frequency=min_frequency)
    os.replace(tmp, codes_path)
    return codes_path


class BpeEncoder:
    """Applies a subword-nmt code table to tokenised lines (``subword-nmt apply-bpe``)."""

    def __init__(self, codes_path: str | Path, separator: str = BPE_SEPARATOR,
                 glossaries: Sequence[str] = ()):
        from subword_nmt.apply_bpe import BPE

        with open(codes_path, encoding="utf-8") as codes:
            # glossary words (e.g. a separator token) are never split
            self._bpe = BPE(codes, separator=separator, glossaries=list(glossaries) or None)

    def encode(self, line: str) -> str:
        return self._bpe.process_line(line.strip())

    def encode_lines(self, lines: Iterable[str]) -> list[str]:
        return [self.encode(line) for line in lines]


def apply_bpe(lines: Iterable[str], codes_path: str | Path, glossaries: Sequence[str] = ()
              ) -> list[str]:
    """Segment every line with the BPE codes in ``codes_path``."""
    return BpeEncoder(codes_path, glossaries=glossaries).encode_lines(lines)


def remove_bpe(line: str, separator: str = BPE_SEPARATOR) -> str:
    """Join subwords back into words (fairseq's ``--remove-bpe``)."""
    return (line + " ").replace(separator + " ", "").rstrip()


# ---------------------------------------------------------------------------- SentencePiece
def train_sentencepiece(files: Sequence[str | Path], model_prefix: str | Path, vocab_size: int,
                        *, model_type: str = "unigram", input_sentence_size: int = 2_000_000,
                        character_coverage: float = 1.0) -> Path:
    """Train a SentencePiece model on ``files``; returns ``<model_prefix>.model``."""
    import sentencepiece as spm

    prefix = Path(model_prefix)
    tmp_prefix = prefix.with_name(f".{prefix.name}.tmp{os.getpid()}")
    spm.SentencePieceTrainer.train(
        input=",".join(str(f) for f in files), model_prefix=str(tmp_prefix),
        vocab_size=vocab_size, model_type=model_type, character_coverage=character_coverage,
        input_sentence_size=input_sentence_size, shuffle_input_sentence=True,
        # fairseq adds its own <s>, </s>, <pad>, <unk>; SentencePiece must not emit them.
        bos_id=-1, eos_id=-1, unk_surface="<unk>", minloglevel=2,
        # a soft limit: small corpora (tests) may not support the requested size
        hard_vocab_limit=False,
    )
    for ext in (".model", ".vocab"):
        os.replace(f"{tmp_prefix}{ext}", f"{prefix}{ext}")
    return Path(f"{prefix}.model")


def _sentencepiece(model_path: str | Path):
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_file=str(model_path))


def sentencepiece_encode(lines: Iterable[str], model_path: str | Path, *,
                         max_pieces: int | None = None) -> list[str]:
    """Pieces of each line joined by spaces, truncated to ``max_pieces`` when given."""
    processor = _sentencepiece(model_path)
    out = []
    for line in lines:
        pieces = processor.encode(line.strip(), out_type=str)
        out.append(" ".join(pieces[:max_pieces] if max_pieces else pieces))
    return out


def sentencepiece_decode(lines: Iterable[str], model_path: str | Path) -> list[str]:
    """Text of each line of space-separated pieces."""
    processor = _sentencepiece(model_path)
    return [processor.decode(line.split()) for line in lines]


# ---------------------------------------------------------------------------- documents
def pair_length(src: str, tgt: str) -> int:
    """What a sentence pair adds to a segment's length, counted as G-Transformer does.

    G-Transformer's segment builder (Bao et al. 2021, ``convert_to_segment`` of its data
    builder) counts each sentence pair as the whitespace tokens of its longer side plus 2 (the
    ``<s>``/``</s>`` that delimit each sentence in its segments; we count them but do not
    write them, since our models do not use sentence tags).
    """
    return max(len(src.split()), len(tgt.split())) + 2


def pack_documents(documents: Iterable[Sequence[tuple[str, str]]], max_tokens: int
                   ) -> list[tuple[str, str]]:
    """Join consecutive sentence pairs of each document into segments.

    A segment is a run of whole sentence pairs: it never splits a pair, so both sides hold
    exactly the same sentences. A pair joins the current segment while the segment's length
    (the sum of ``pair_length``) plus the pair's stays below ``max_tokens`` (G-Transformer's
    strict ``<``); otherwise it starts a new segment. A pair longer than the limit by itself
    gets a segment of its own, kept whole (``oversized_pairs`` counts them). Segments never
    cross documents.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    segments: list[tuple[str, str]] = []
    for document in documents:
        src: list[str] = []
        tgt: list[str] = []
        length = 0
        for s, t in document:
            if not s.split() and not t.split():
                continue
            size = pair_length(s, t)
            if src and length + size >= max_tokens:
                segments.append((" ".join(src), " ".join(tgt)))
                src, tgt, length = [], [], 0
            src.append(s.strip())
            tgt.append(t.strip())
            length += size
        if src:
            segments.append((" ".join(src), " ".join(tgt)))
    return segments


def oversized_pairs(documents: Iterable[Sequence[tuple[str, str]]], max_tokens: int) -> int:
    """How many sentence pairs reach ``max_tokens`` alone (each is a segment of its own)."""
    return sum(pair_length(s, t) >= max_tokens for document in documents for s, t in document
               if s.split() or t.split())


def document_lines(doc_ids: Sequence[str]) -> list[list[int]]:
    """Line numbers of each document: a change of id starts a new document."""
    return [[i for i, _ in group]
            for _, group in itertools.groupby(enumerate(doc_ids), key=lambda item: item[1])]


def split_every(lines: Sequence[str], every: int, offset: int = 0
                ) -> tuple[list[str], list[str]]:
    """Line i goes to ``taken`` when ``i % every == offset`` (fairseq: every 23rd/100th)."""
    if every < 2:
        raise ValueError(f"split_every needs every >= 2, got {every}")
    kept, taken = [], []
    for i, line in enumerate(lines):
        (taken if i % every == offset else kept).append(line)
    return kept, taken


# ---------------------------------------------------------------------------- CLI
def _cmd_tokenize(a: argparse.Namespace) -> None:
    if len(a.input) != len(a.output):
        raise SystemExit("error: tokenize needs one -o file per -i file")
    for src, dst in zip(a.input, a.output):
        lines = moses_tokenize(
            read_lines(src), a.lang, lowercase=a.lowercase,
            aggressive_dash_splits=a.aggressive_dash_splits,
            normalize_punctuation=a.normalize_punctuation,
            straight_apostrophes=a.straight_apostrophes, workers=a.workers,
        )
        write_lines(dst, lines)


def _cmd_detokenize(a: argparse.Namespace) -> None:
    write_lines(a.output, moses_detokenize(read_lines(a.input), a.lang))


def _cmd_lowercase(a: argparse.Namespace) -> None:
    write_lines(a.output, (line.lower() for line in read_lines(a.input)))


def _cmd_clean(a: argparse.Namespace) -> None:
    src, tgt = clean_parallel(read_lines(a.src_in), read_lines(a.tgt_in), min_len=a.min_len,
                              max_len=a.max_len, ratio=a.ratio)
    write_lines(a.src_out, src)
    write_lines(a.tgt_out, tgt)
    print(f"clean: kept {len(src)} pairs", file=sys.stderr)


def _cmd_split_every(a: argparse.Namespace) -> None:
    kept, taken = split_every(read_lines(a.input), a.every, a.offset)
    write_lines(a.kept, kept)
    write_lines(a.taken, taken)


def _cmd_learn_bpe(a: argparse.Namespace) -> None:
    learn_bpe(a.inputs, a.codes, a.merges, min_frequency=a.min_frequency)


def _cmd_apply_bpe(a: argparse.Namespace) -> None:
    if len(a.inputs) != len(a.outputs):
        raise SystemExit("error: apply-bpe needs one --outputs file per --inputs file")
    encoder = BpeEncoder(a.codes, glossaries=a.glossaries)
    for src, dst in zip(a.inputs, a.outputs):
        write_lines(dst, encoder.encode_lines(read_lines(src)))


def _cmd_spm_train(a: argparse.Namespace) -> None:
    train_sentencepiece(a.inputs, a.model_prefix, a.vocab_size, model_type=a.model_type,
                        input_sentence_size=a.input_sentence_size)


def _cmd_spm_encode(a: argparse.Namespace) -> None:
    if len(a.inputs) != len(a.outputs):
        raise SystemExit("error: spm-encode needs one --outputs file per --inputs file")
    for src, dst in zip(a.inputs, a.outputs):
        write_lines(dst, sentencepiece_encode(read_lines(src), a.model, max_pieces=a.max_pieces))


def _cmd_spm_decode(a: argparse.Namespace) -> None:
    write_lines(a.output, sentencepiece_decode(read_lines(a.input), a.model))


def _pairs_of(a: argparse.Namespace) -> tuple[list[str], list[str]]:
    src, tgt = read_lines(a.src_in), read_lines(a.tgt_in)
    if len(src) != len(tgt):
        raise SystemExit(f"error: {a.src_in} and {a.tgt_in} differ in length")
    return src, tgt


def _cmd_pack(a: argparse.Namespace) -> None:
    src, tgt = _pairs_of(a)
    doc_ids = read_lines(a.doc_ids)
    if len(doc_ids) != len(src):
        raise SystemExit(f"error: {a.doc_ids} has {len(doc_ids)} lines, {a.src_in} {len(src)}")
    documents = [[(src[i], tgt[i]) for i in lines] for lines in document_lines(doc_ids)]
    segments = pack_documents(documents, a.max_tokens)
    write_lines(a.src_out, (s for s, _ in segments))
    write_lines(a.tgt_out, (t for _, t in segments))
    print(f"pack: {len(documents)} documents -> {len(segments)} segments below {a.max_tokens} "
          f"tokens (G-Transformer's count); {oversized_pairs(documents, a.max_tokens)} sentence "
          f"pairs reach the limit alone and are segments of their own", file=sys.stderr)


def add_command(sub: argparse._SubParsersAction, name: str,
                func: Callable[[argparse.Namespace], None], help: str) -> argparse.ArgumentParser:
    """A sub-command whose arguments :func:`run_cli` hands to ``func``."""
    p = sub.add_parser(name, help=help)
    p.set_defaults(func=func)
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    def io_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("-i", "--input", default="-", help="input file (default stdin)")
        p.add_argument("-o", "--output", default="-", help="output file (default stdout)")

    def pair_file_args(p: argparse.ArgumentParser) -> None:
        for name in ("src-in", "tgt-in", "src-out", "tgt-out"):
            p.add_argument(f"--{name}", required=True, help=f"{name.replace('-', ' ')} file")

    p = add_command(sub, "tokenize", _cmd_tokenize, "Moses tokenisation (sacremoses)")
    p.add_argument("-i", "--input", nargs="+", default=["-"], help="input files (default stdin)")
    p.add_argument("-o", "--output", nargs="+", default=["-"],
                   help="one output file per input (default stdout)")
    p.add_argument("--lang", required=True, help="language code for Moses rules, e.g. de")
    p.add_argument("--lowercase", action="store_true", help="lower-case after tokenising")
    p.add_argument("--aggressive-dash-splits", action="store_true",
                   help="split hyphens as tokenizer.perl -a does (WMT14 recipe)")
    p.add_argument("--normalize-punctuation", action="store_true",
                   help="run Moses punctuation normalisation (and drop non-printing "
                        "characters) first")
    p.add_argument("--straight-apostrophes", action="store_true",
                   help="map U+2019 to ' first, as fairseq's scripts do for test sets")
    p.add_argument("--workers", type=int, default=1, help="processes to tokenise with")

    p = add_command(sub, "detokenize", _cmd_detokenize, "undo Moses tokenisation")
    io_args(p)
    p.add_argument("--lang", required=True, help="language code for Moses rules")

    p = add_command(sub, "lowercase", _cmd_lowercase, "lower-case every line")
    io_args(p)

    p = add_command(sub, "clean", _cmd_clean, "clean-corpus-n: length and ratio filter of a pair")
    pair_file_args(p)
    p.add_argument("--min-len", type=int, default=1, help="fewest tokens a side may have")
    p.add_argument("--max-len", type=int, default=175, help="most tokens a side may have")
    p.add_argument("--ratio", type=float, default=1.5, help="largest length ratio of a pair")

    p = add_command(sub, "split-every", _cmd_split_every, "send every N-th line to a second file")
    p.add_argument("-i", "--input", required=True, help="input file")
    p.add_argument("--every", type=int, required=True, help="N: take lines with i %% N == offset")
    p.add_argument("--offset", type=int, default=0, help="which residue to take (default 0)")
    p.add_argument("--kept", required=True, help="file for the other lines")
    p.add_argument("--taken", required=True, help="file for the taken lines")

    p = add_command(sub, "learn-bpe", _cmd_learn_bpe, "learn joint BPE codes (subword-nmt)")
    p.add_argument("inputs", nargs="+", help="tokenised training files (all languages)")
    p.add_argument("--codes", required=True, help="output code table")
    p.add_argument("--merges", type=int, required=True, help="number of merge operations")
    p.add_argument("--min-frequency", type=int, default=2, help="stop at pairs rarer than this")

    p = add_command(sub, "apply-bpe", _cmd_apply_bpe, "segment files with BPE codes")
    p.add_argument("--codes", required=True, help="code table from learn-bpe")
    p.add_argument("--inputs", nargs="+", required=True, help="tokenised files")
    p.add_argument("--outputs", nargs="+", required=True, help="one output per input")
    p.add_argument("--glossaries", nargs="*", default=[], help="words never to split")

    p = add_command(sub, "spm-train", _cmd_spm_train, "train a SentencePiece model")
    p.add_argument("inputs", nargs="+", help="raw training text files")
    p.add_argument("--model-prefix", required=True, help="writes PREFIX.model and PREFIX.vocab")
    p.add_argument("--vocab-size", type=int, required=True, help="pieces in the vocabulary")
    p.add_argument("--model-type", default="unigram", choices=["unigram", "bpe"],
                   help="SentencePiece algorithm")
    p.add_argument("--input-sentence-size", type=int, default=2_000_000,
                   help="lines sampled for training")

    p = add_command(sub, "spm-encode", _cmd_spm_encode, "encode files into SentencePiece pieces")
    p.add_argument("--model", required=True, help="the .model file")
    p.add_argument("--inputs", nargs="+", required=True, help="raw text files")
    p.add_argument("--outputs", nargs="+", required=True, help="one output per input")
    p.add_argument("--max-pieces", type=int, default=None, help="truncate each line to this")

    p = add_command(sub, "spm-decode", _cmd_spm_decode, "decode SentencePiece pieces to text")
    io_args(p)
    p.add_argument("--model", required=True, help="the .model file")

    p = add_command(sub, "pack", _cmd_pack, "pack document sentence pairs into segments")
    pair_file_args(p)
    p.add_argument("--max-tokens", type=int, required=True, help="most tokens a segment side")
    p.add_argument("--doc-ids", required=True,
                   help="one document id a line, parallel to the inputs; a change of id "
                        "starts a new document")
    return parser


def run_cli(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> None:
    """Parse and run a sub-command; a bad input file ends it with one line, no traceback."""
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except (OSError, ValueError, KeyError, UnicodeDecodeError) as err:
        detail = f"missing field {err}" if isinstance(err, KeyError) else str(err)
        parser.exit(1, f"{parser.prog} {args.command}: error: {detail}\n")


def main(argv: Sequence[str] | None = None) -> None:
    run_cli(build_parser(), argv)


if __name__ == "__main__":
    sys.stdout = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", newline="\n")
    main()
