#!/usr/bin/env python3
"""Readers for the published formats of the recipes' corpora, writing plain one-line-a-sentence
files that ``prepare_text.py`` then tokenises.

- IWSLT14 (WIT3 ``de-en.tgz``): ``train.tags.de-en.{de,en}`` hold one sentence a line between
  tag lines (``<url>``, ``<talkid>``, ``<keywords>``, ``<speaker>``, ...) that are dropped;
  ``<title>``/``<description>`` lines keep their text. Dev/test sets are
  ``IWSLT14.TED*.{dev,tst}20xx.de-en.{de,en}.xml`` with one ``<seg id="N">`` a line.
- WMT14: ``.sgm`` test sets use the same ``<seg id=...>`` lines; training corpora are plain.
- Europarl v7 source release (``europarl.tgz``): ``txt/<lang>/ep-YY-MM-DD[-NN].txt``, one
  session a file, one paragraph a line between ``<CHAPTER ID=..>``, ``<SPEAKER ..>`` and
  ``<P>`` tag lines (plus ``<BRK>``, closing tags and empty lines, dropped). Paragraphs are
  split into sentences with the Moses splitter. A document is one chapter present in both
  languages with the same tag structure; inside each block between tags the sentences are
  aligned by Gale and Church's length-based dynamic programme (what Europarl's own
  ``sentence-align-corpus.perl`` does, after the same sentence splitting).
- The document-level Europarl split later work evaluates on (Maruf et al. 2019, used by
  G-Transformer): ``concatenated_en2de_{train,dev,test}_{en,de}.txt``, one sentence a line,
  a ``<d>`` line before each document.
- arXiv / PubMed (Cohan et al. 2018): ``{train,val,test}.txt``, one JSON object a line with
  ``article_text`` (list of sentences) and ``abstract_text`` (list of ``<S> ... </S>``).
- Gigaword (Rush et al. 2015, UniLM's ``org_data`` layout): ``{train,dev,test}.{src,tgt}.txt``.
- SQuAD 1.1: ``train-v1.1.json`` / ``dev-v1.1.json`` (``data[].paragraphs[].qas[]``).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from scripts.recipes.lib.answer_window import PASSAGE_TOKENS, answer_chunk, locate_answer
from scripts.recipes.lib.prepare_text import (
    add_command,
    moses_tokenize,
    read_lines,
    run_cli,
    write_lines,
)
from scripts.recipes.lib.sentence_split import split_sentences

_SEG = re.compile(r"<seg[^>]*>(.*)</seg>", re.IGNORECASE)
_KEEP_TEXT_TAGS = re.compile(r"</?(title|description)>", re.IGNORECASE)


# ---------------------------------------------------------------------------- IWSLT / WMT
def iwslt_train_lines(lines: Iterable[str]) -> list[str]:
    """Sentences of a ``train.tags`` file: tag lines dropped, title/description text kept."""
    out = []
    for line in lines:
        text = line.strip()
        if _KEEP_TEXT_TAGS.match(text):
            out.append(_KEEP_TEXT_TAGS.sub("", text).strip())
        elif not text.startswith("<"):
            out.append(text)
    return out


def xml_segments(lines: Iterable[str]) -> list[str]:
    """Text of every ``<seg id=...>...</seg>`` line (IWSLT .xml, WMT .sgm)."""
    return [m.group(1).strip() for m in map(_SEG.search, lines) if m]


# ---------------------------------------------------------------------------- Gale-Church
# Priors of the alignment types and the length model of Gale & Church (1993): characters of
# the target ~ c * characters of the source, variance s2 per source character.
_PRIORS = {(1, 1): 0.89, (1, 0): 0.0099 / 2, (0, 1): 0.0099 / 2, (2, 1): 0.089 / 2,
           (1, 2): 0.089 / 2, (2, 2): 0.011}
_C, _S2 = 1.0, 6.8


def _match_cost(len_src: int, len_tgt: int) -> float:
    if len_src == 0 and len_tgt == 0:
        return 0.0
    mean = (len_src + len_tgt / _C) / 2
    delta = (len_tgt - len_src * _C) / math.sqrt(mean * _S2)
    # two-sided tail probability of a standard normal, floored so log stays finite
    tail = max(math.erfc(abs(delta) / math.sqrt(2)), 1e-300)
    return -math.log(tail)


def gale_church(src: Sequence[str], tgt: Sequence[str]) -> list[tuple[str, str]]:
    """Align two blocks of sentences; returns the aligned (source, target) beads.

    Beads of types 1-1, 1-0, 0-1, 2-1, 1-2 and 2-2; sentences in 2-x beads are joined by a
    space and beads with an empty side are dropped.
    """
    n, m = len(src), len(tgt)
    ls, lt = [len(s) for s in src], [len(t) for t in tgt]
    cost = [[math.inf] * (m + 1) for _ in range(n + 1)]
    back: list[list[tuple[int, int] | None]] = [[None] * (m + 1) for _ in range(n + 1)]
    cost[0][0] = 0.0
    for i in range(n + 1):
        for j in range(m + 1):
            if i == 0 and j == 0:
                continue
            for (di, dj), prior in _PRIORS.items():
                if i < di or j < dj or cost[i - di][j - dj] == math.inf:
                    continue
                c = cost[i - di][j - dj] - math.log(prior) + _match_cost(
                    sum(ls[i - di:i]), sum(lt[j - dj:j]))
                if c < cost[i][j]:
                    cost[i][j], back[i][j] = c, (di, dj)
    beads = []
    i, j = n, m
    while i or j:
        step = back[i][j]
        assert step is not None
        di, dj = step
        beads.append((" ".join(src[i - di:i]), " ".join(tgt[j - dj:j])))
        i, j = i - di, j - dj
    return [(s, t) for s, t in reversed(beads) if s and t]


# ---------------------------------------------------------------------------- Europarl
_TAG_LINE = re.compile(r"^<\s*(/?)\s*([A-Za-z]+)\b([^>]*)>$")
_ID = re.compile(r'ID\s*=\s*"?([^"\s>]+)', re.IGNORECASE)
# tags that open a block: text is aligned only within blocks that correspond in both languages
_BLOCK_TAGS = {"CHAPTER", "SPEAKER", "P"}

Block = tuple[str, list[list[str]]]  # (opening tag, paragraphs, each a list of sentences)


def europarl_chapters(lines: Iterable[str], lang: str) -> dict[str, list[Block]]:
    """Chapters of one raw session file: chapter id -> blocks of sentence-split paragraphs.

    The v7 release holds one paragraph a line. ``<CHAPTER ID=..>``, ``<SPEAKER ..>`` and
    ``<P>`` open a block; ``<BRK>``, closing tags, any other tag line and empty lines carry no
    text and are dropped. Each paragraph is split into sentences with the Moses splitter, as
    Europarl's ``sentence-align-corpus.perl`` does before aligning.
    """
    chapters: dict[str, list[Block]] = {}
    blocks: list[Block] | None = None
    for line in lines:
        text = line.strip()
        if not text:
            continue
        tag = _TAG_LINE.match(text)
        if tag:
            closing, name = tag.group(1), tag.group(2).upper()
            if closing or name not in _BLOCK_TAGS:
                continue
            if name == "CHAPTER":
                ident = _ID.search(tag.group(3))
                blocks = chapters.setdefault(ident.group(1) if ident else str(len(chapters)), [])
            if blocks is not None:
                blocks.append((name, []))
        elif blocks is not None:
            sentences = split_sentences(text, lang)
            if sentences:
                blocks[-1][1].append(sentences)
    return chapters


def align_block(src: list[list[str]], tgt: list[list[str]]) -> list[tuple[str, str]]:
    """Sentence pairs of one block: paragraph by paragraph when both sides have as many
    paragraphs, else the block's sentences as one sequence (Gale-Church either way)."""
    if len(src) == len(tgt):
        return [pair for s, t in zip(src, tgt) for pair in gale_church(s, t)]
    return gale_church([x for p in src for x in p], [x for p in tgt for x in p])


def europarl_documents(src_dir: Path, tgt_dir: Path, src_lang: str, tgt_lang: str
                       ) -> tuple[list[tuple[str, list[tuple[str, str]]]], int]:
    """Aligned documents (id, sentence pairs) of two language folders, and chapters skipped."""
    documents, skipped = [], 0
    for src_file in sorted(src_dir.glob("ep-*.txt")):
        tgt_file = tgt_dir / src_file.name
        if not tgt_file.is_file():
            continue
        src_chapters = europarl_chapters(read_lines(src_file), src_lang)
        tgt_chapters = europarl_chapters(read_lines(tgt_file), tgt_lang)
        for chapter, src_blocks in src_chapters.items():
            tgt_blocks = tgt_chapters.get(chapter)
            if tgt_blocks is None or [b[0] for b in src_blocks] != [b[0] for b in tgt_blocks]:
                skipped += 1
                continue
            pairs = []
            for (_, s), (_, t) in zip(src_blocks, tgt_blocks):
                pairs.extend(align_block(s, t))
            if pairs:
                documents.append((f"{src_file.stem}#{chapter}", pairs))
    return documents, skipped


DOCUMENT_START = "<d>"


def concatenated_documents(src_lines: Sequence[str], tgt_lines: Sequence[str], name: str
                           ) -> list[tuple[str, list[tuple[str, str]]]]:
    """Documents of the ``concatenated_en2de_*`` files (one sentence a line, a ``<d>`` line
    before each document), ids ``name#N``. The two sides must agree line by line."""
    if len(src_lines) != len(tgt_lines):
        raise ValueError(f"{name}: the two languages have {len(src_lines)} and "
                         f"{len(tgt_lines)} lines; the files must be parallel")
    documents: list[tuple[str, list[tuple[str, str]]]] = []
    for number, (s, t) in enumerate(zip(src_lines, tgt_lines), 1):
        s_start, t_start = s.strip() == DOCUMENT_START, t.strip() == DOCUMENT_START
        if s_start != t_start:
            raise ValueError(f"{name} line {number}: a document starts on one side only")
        if s_start or not documents:
            documents.append((f"{name}#{len(documents)}", []))
            if s_start:
                continue
        if s.strip() and t.strip():
            documents[-1][1].append((s.strip(), t.strip()))
    return [d for d in documents if d[1]]


# ---------------------------------------------------------------------------- summarization
def cohan_pairs(lines: Iterable[str]) -> list[tuple[str, str]]:
    """(article, abstract) of each jsonl line of the arXiv/PubMed release."""
    pairs = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"line {number} is not JSON ({err}); expected Cohan et al.'s "
                             "jsonl with article_text and abstract_text") from err
        article = " ".join(s.strip() for s in record["article_text"])
        abstract = " ".join(re.sub(r"</?S>", "", s).strip() for s in record["abstract_text"])
        article, abstract = " ".join(article.split()), " ".join(abstract.split())
        if article and abstract:
            pairs.append((article, abstract))
    return pairs


# ---------------------------------------------------------------------------- SQuAD
ANSWER_SEPARATOR = "<sep>"


def squad_qg_pairs(path: Path, max_passage_tokens: int = PASSAGE_TOKENS
                   ) -> list[tuple[str, str, str]]:
    """(article title, "answer <sep> paragraph", question) for every question of SQuAD 1.1.

    Answer and paragraph are Moses-tokenised and lower-cased here, because the separator must
    not be tokenised; the question gets the same treatment. A paragraph longer than
    ``max_passage_tokens`` (464, the paper's; 0 = whole) keeps the chunk that holds the
    answer (``answer_window.answer_chunk``), not its first tokens.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))["data"]
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not JSON ({err}): expected SQuAD 1.1's format") from err
    raw = []
    for number, article in enumerate(data):
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answer = qa["answers"][0]
                prefix = paragraph["context"][: int(answer.get("answer_start", 0))]
                raw.append((article.get("title", str(number)), answer["text"],
                            paragraph["context"], qa["question"], prefix))
    answers = moses_tokenize([r[1] for r in raw], "en", lowercase=True)
    contexts = moses_tokenize([r[2] for r in raw], "en", lowercase=True)
    questions = moses_tokenize([r[3] for r in raw], "en", lowercase=True)
    if max_passage_tokens > 0:
        # the answer's token position: the tokens before its character offset
        prefixes = moses_tokenize([r[4] for r in raw], "en", lowercase=True)
        chunks = []
        for answer, context, prefix in zip(answers, contexts, prefixes):
            words, answer_words = context.split(), answer.split()
            start = locate_answer(words, answer_words, len(prefix.split()))
            lo, hi = answer_chunk(len(words), start, start + len(answer_words),
                                  max_passage_tokens)
            chunks.append(" ".join(words[lo:hi]))
        contexts = chunks
    return [(r[0], f"{a} {ANSWER_SEPARATOR} {c}", q)
            for r, a, c, q in zip(raw, answers, contexts, questions)]


# ---------------------------------------------------------------------------- CLI
def _write_pairs(prefix: Path, src_lang: str, tgt_lang: str, pairs: Sequence[tuple[str, str]]
                 ) -> None:
    write_lines(f"{prefix}.{src_lang}", (p[0] for p in pairs))
    write_lines(f"{prefix}.{tgt_lang}", (p[1] for p in pairs))
    print(f"{prefix}.{{{src_lang},{tgt_lang}}}: {len(pairs)} pairs", file=sys.stderr)


def _cmd_iwslt_train(a: argparse.Namespace) -> None:
    write_lines(a.output, iwslt_train_lines(read_lines(a.input)))


def _cmd_segments(a: argparse.Namespace) -> None:
    lines: list[str] = []
    for name in a.inputs:
        lines.extend(xml_segments(read_lines(name)))
    write_lines(a.output, lines)


def _write_documents(out: Path, split: str, src_lang: str, tgt_lang: str,
                     documents: Sequence[tuple[str, list[tuple[str, str]]]]) -> None:
    rows = [(doc_id, s, t) for doc_id, pairs in documents for s, t in pairs]
    write_lines(out / f"{split}.docid", (r[0] for r in rows))
    _write_pairs(out / split, src_lang, tgt_lang, [(r[1], r[2]) for r in rows])


def _cmd_europarl(a: argparse.Namespace) -> None:
    root = Path(a.txt_dir)
    documents, skipped = europarl_documents(root / a.src_lang, root / a.tgt_lang,
                                            a.src_lang, a.tgt_lang)
    if not documents:
        raise ValueError(f"no aligned documents in {root}/{a.src_lang} and "
                         f"{root}/{a.tgt_lang} (expected ep-*.txt session files)")
    splits: dict[str, list] = {"train": [], "valid": [], "test": []}
    for index, document in enumerate(documents):
        residue = index % a.holdout_every
        split = ("valid" if residue == a.holdout_every - 2 else
                 "test" if residue == a.holdout_every - 1 else "train")
        splits[split].append(document)
    for split, part in splits.items():
        _write_documents(Path(a.out_dir), split, a.src_lang, a.tgt_lang, part)
    print(f"europarl: {len(documents)} documents, {skipped} chapters skipped (tag structure "
          "differs between languages)", file=sys.stderr)


def _cmd_concatenated(a: argparse.Namespace) -> None:
    root = Path(a.dir)
    for split, name in (("train", "train"), ("valid", "dev"), ("test", "test")):
        files = [root / f"concatenated_{a.pair}_{name}_{lang}.txt"
                 for lang in (a.src_lang, a.tgt_lang)]
        documents = concatenated_documents(read_lines(files[0]), read_lines(files[1]), name)
        if not documents:
            raise ValueError(f"no documents in {files[0]}")
        _write_documents(Path(a.out_dir), split, a.src_lang, a.tgt_lang, documents)
        print(f"{split}: {len(documents)} documents", file=sys.stderr)


def cohan_sentences(lines: Iterable[str]) -> Iterator[str]:
    """Every article and abstract sentence, one a line: SentencePiece's training text
    (whole articles exceed its sentence-length limit and would be skipped)."""
    for line in lines:
        if line.strip():
            record = json.loads(line)
            for s in record["article_text"] + record["abstract_text"]:
                text = " ".join(re.sub(r"</?S>", "", s).split())
                if text:
                    yield text


def _cmd_cohan(a: argparse.Namespace) -> None:
    lines = read_lines(a.input)
    _write_pairs(Path(a.out_prefix), "src", "tgt", cohan_pairs(lines))
    if a.sentences:
        write_lines(f"{a.out_prefix}.sentences", cohan_sentences(lines))


def _cmd_squad(a: argparse.Namespace) -> None:
    rows = squad_qg_pairs(Path(a.input), a.max_passage_tokens)
    if not rows:
        raise ValueError(f"{a.input} holds no questions")
    if a.split_articles:
        # SQuAD has no public test set: its dev articles are split in halves (valid, test).
        titles = list(dict.fromkeys(r[0] for r in rows))
        first = set(titles[: len(titles) // 2])
        halves = {"valid": [r for r in rows if r[0] in first],
                  "test": [r for r in rows if r[0] not in first]}
        for split, part in halves.items():
            _write_pairs(Path(a.out_dir) / split, "src", "tgt", [(r[1], r[2]) for r in part])
    else:
        _write_pairs(Path(a.out_dir) / a.split_name, "src", "tgt", [(r[1], r[2]) for r in rows])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = add_command(sub, "iwslt-train", _cmd_iwslt_train, "sentences of an IWSLT train.tags file")
    p.add_argument("-i", "--input", required=True, help="train.tags.de-en.<lang>")
    p.add_argument("-o", "--output", required=True, help="output text file")

    p = add_command(sub, "segments", _cmd_segments, "<seg> lines of .xml/.sgm files, concatenated")
    p.add_argument("inputs", nargs="+", help="IWSLT .xml or WMT .sgm files, in order")
    p.add_argument("-o", "--output", required=True, help="output text file")

    def document_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--src-lang", default="en", help="source language (folder or suffix)")
        p.add_argument("--tgt-lang", default="de", help="target language (folder or suffix)")
        p.add_argument("--out-dir", required=True,
                       help="writes {train,valid,test}.{src,tgt,docid}")

    p = add_command(sub, "europarl", _cmd_europarl,
                    "aligned documents of the Europarl v7 source release")
    p.add_argument("--txt-dir", required=True, help="folder holding txt/<lang>/ep-*.txt's <lang>")
    p.add_argument("--holdout-every", type=int, default=50,
                   help="of every N documents, one goes to valid and one to test")
    document_args(p)

    p = add_command(sub, "concatenated-docs", _cmd_concatenated,
                    "documents of the concatenated_<pair>_{train,dev,test} split")
    p.add_argument("--dir", required=True, help="folder holding the concatenated_*.txt files")
    p.add_argument("--pair", default="en2de", help="the files' language-pair name")
    document_args(p)

    p = add_command(sub, "cohan", _cmd_cohan, "article/abstract pairs of arXiv or PubMed jsonl")
    p.add_argument("-i", "--input", required=True, help="train.txt, val.txt or test.txt")
    p.add_argument("--out-prefix", required=True, help="writes PREFIX.src and PREFIX.tgt")
    p.add_argument("--sentences", action="store_true",
                   help="also write PREFIX.sentences, one sentence a line (SentencePiece input)")

    p = add_command(sub, "squad-qg", _cmd_squad, "question generation pairs of SQuAD 1.1")
    p.add_argument("-i", "--input", required=True, help="train-v1.1.json or dev-v1.1.json")
    p.add_argument("--out-dir", required=True, help="writes train.{src,tgt} or valid/test")
    p.add_argument("--split-articles", action="store_true",
                   help="split by article into valid (first half) and test (second half)")
    p.add_argument("--split-name", default="train",
                   help="without --split-articles: the output's name (train, valid, test)")
    p.add_argument("--max-passage-tokens", type=int, default=PASSAGE_TOKENS,
                   help="keep the chunk of at most this many paragraph tokens that holds the "
                        f"answer (default {PASSAGE_TOKENS}, the paper's; 0 = whole paragraph)")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    run_cli(build_parser(), argv)


if __name__ == "__main__":
    main()
