"""The demo's long-input summarization data: manual pages in, NAME lines out.

``build_summary_data`` reads the pages (``scripts/demo/manpage_corpus.py``), learns a
SentencePiece model on the training pages and their summaries, keeps the pages whose body is
at least ``source_tokens`` pieces long and cuts them there (so every input has exactly that
length with its end-of-sentence token), and writes the texts ``fairseq-preprocess`` reads plus
the untouched test summaries that ROUGE scores against. With too few long pages (no man pages
on the machine, or a fixture) it says so and builds a generated task instead.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List

from scripts.demo.manpage_corpus import SPLITS, Document, build_corpus, write_corpus
from scripts.recipes.lib.prepare_text import (
    read_lines,
    sentencepiece_encode,
    train_sentencepiece,
    write_lines,
)

SOURCE, TARGET = "doc", "sum"


@dataclass(frozen=True)
class SummaryScale:
    """Sizes of the summarization part of one demo scale."""

    source_tokens: int     # every input is cut to this many tokens (pieces + end of sentence)
    target_tokens: int     # summaries are cut to this many pieces
    vocab: int             # SentencePiece vocabulary
    layers: int
    dim: int
    ffn: int
    heads: int
    max_tokens: int        # source tokens per batch
    max_update: int
    safety_cap_s: float    # not a budget: a net far above the time max_update takes
    warmup: int
    lr: float
    max_test: int
    min_train_docs: int    # fewer long pages than this: the generated task instead
    heldout_per_mille: int
    generated_docs: int    # training documents of the generated fallback
    # the Transpooler row (the vanilla encoder's cost: it pools only after the last layer)
    transpooler: bool = True


def generated_summaries(n_train: int, words_per_doc: int, seed: int = 1
                        ) -> Dict[str, List[Document]]:
    """A learnable stand-in for page summarization, for machines without manual pages.

    Each document is filler words from one made-up vocabulary with its 3-5 topic words (from
    another) each repeated at a few random places; the summary is the topic words in order of
    first appearance. A model must learn to find the words that are not filler.
    """
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "te", "vo", "zu", "ba", "di", "fe"]

    def vocabulary(size: int, syllable_count: int) -> List[str]:
        words: set = set()
        while len(words) < size:
            words.add("".join(rng.choice(syllables) for _ in range(syllable_count)))
        return sorted(words)

    filler, topics = vocabulary(200, 3), vocabulary(150, 4)
    sizes = {"train": n_train, "valid": max(20, n_train // 10), "test": max(20, n_train // 10)}
    splits: Dict[str, List[Document]] = {}
    for split, size in sizes.items():
        docs = []
        for i in range(size):
            chosen = rng.sample(topics, rng.randint(3, 5))
            words = [rng.choice(filler) for _ in range(words_per_doc)]
            for topic in chosen:
                for _ in range(4):
                    words[rng.randrange(words_per_doc)] = topic
            order = sorted(chosen, key=lambda t: words.index(t) if t in words else words_per_doc)
            docs.append(Document(" ".join(words), " ".join(order), f"{split}{i}"))
        splits[split] = docs
    return splits


def _encode_and_cut(raw: Path, prep: Path, model: Path, scale: SummaryScale
                    ) -> Dict[str, int]:
    """Encode every split; keep long-enough documents, cut to size; returns kept counts."""
    kept = {}
    for split in SPLITS:
        docs = sentencepiece_encode(read_lines(raw / f"{split}.{SOURCE}"), model)
        sums = sentencepiece_encode(read_lines(raw / f"{split}.{TARGET}"), model)
        texts = read_lines(raw / f"{split}.{TARGET}")
        rows = [(d.split(), s.split(), t) for d, s, t in zip(docs, sums, texts)
                if len(d.split()) >= scale.source_tokens - 1]
        if split == "test":
            rows = rows[: scale.max_test]
        write_lines(prep / f"{split}.{SOURCE}",
                    (" ".join(d[: scale.source_tokens - 1]) for d, _, _ in rows))
        write_lines(prep / f"{split}.{TARGET}",
                    (" ".join(s[: scale.target_tokens]) for _, s, _ in rows))
        # ROUGE scores against the untouched (lower-cased) summary, not the pieces
        write_lines(prep / f"{split}.reference", (t for _, _, t in rows))
        kept[split] = len(rows)
    return kept


def build_summary_data(man_dir: Path, scale: SummaryScale, raw: Path, prep: Path,
                       say: Callable[[str], None] = print) -> str:
    """Write ``prep/{split}.{doc,sum,reference}``; returns a one-line description of the data."""
    try:
        splits = build_corpus(man_dir, min_words=max(20, scale.source_tokens // 4),
                              valid_per_mille=scale.heldout_per_mille,
                              test_per_mille=scale.heldout_per_mille, log=say)
        origin = f"manual pages ({man_dir}/man*/)"
    except FileNotFoundError as error:
        say(f"No manual pages: {error}.")
        splits = None
    kept: Dict[str, int] = {}
    if splits is not None:
        write_corpus(splits, raw)
        model = train_sentencepiece([raw / f"train.{SOURCE}", raw / f"train.{TARGET}"],
                                    prep / "spm", scale.vocab, input_sentence_size=200_000)
        kept = _encode_and_cut(raw, prep, model, scale)
        if kept["train"] < scale.min_train_docs or not kept["valid"] or not kept["test"]:
            say(f"Only {kept['train']} training pages (valid {kept['valid']}, test "
                f"{kept['test']}) have at least {scale.source_tokens} tokens; "
                f"{scale.min_train_docs} are needed.")
            splits = None
    if splits is None:
        say("Falling back to the GENERATED summarization task (filler words with topic "
            "words; the summary lists the topic words). Its ROUGE says nothing about real "
            "summaries.")
        splits = generated_summaries(scale.generated_docs, scale.source_tokens * 3 // 2)
        origin = "generated task (no usable manual pages)"
        write_corpus(splits, raw)
        model = train_sentencepiece([raw / f"train.{SOURCE}", raw / f"train.{TARGET}"],
                                    prep / "spm", scale.vocab, input_sentence_size=200_000)
        kept = _encode_and_cut(raw, prep, model, scale)
    sizes = ", ".join(f"{split} {n}" for split, n in kept.items())
    return (f"{origin}: {sizes} documents cut to {scale.source_tokens} tokens, "
            f"SentencePiece {scale.vocab} pieces")
