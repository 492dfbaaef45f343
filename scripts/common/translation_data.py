"""The translation corpus of the demo and the ablations: the machine's gettext catalogs (or,
saying so, a generated stand-in where there are too few), Moses-tokenised, lower-cased, in a
joint BPE.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Callable, Dict, List, Protocol

from scripts.common.gettext_corpus import Pair, build_corpus, write_corpus
from scripts.recipes.lib.prepare_text import (
    BpeEncoder,
    learn_bpe,
    moses_tokenize,
    read_lines,
    write_lines,
)

SRC, TGT = "de", "en"
# The generated fallback must be big enough for BPE and batching to behave like real data.
MIN_GETTEXT_TRAIN_PAIRS = 200
Say = Callable[[str], None]


class CorpusSize(Protocol):
    """How much of the corpus a run keeps (the demo's and the ablations' sizes have these)."""

    max_train: int | None      # training pairs kept (None: all)
    max_test: int              # test sentences decoded
    heldout_per_mille: int     # share of catalog pairs in valid, and again in test
    generated_train: int       # training pairs of the generated fallback task


def generated_corpus(n_train: int, seed: int = 1) -> Dict[str, List[Pair]]:
    """A learnable stand-in language pair for machines without gettext catalogs: a made-up
    one-to-one lexicon, and the source's last word moved to second place (a reordering)."""
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "te", "vo", "zu", "ba", "di", "fe"]

    def word(min_syl: int) -> str:
        return "".join(rng.choice(syllables) for _ in range(rng.randint(min_syl, 3)))

    lexicon = {}
    while len(lexicon) < 400:
        lexicon[word(1)] = word(2)
    source_words = sorted(lexicon)
    sizes = {"train": n_train, "valid": 300, "test": 300}
    splits = {}
    for split, size in sizes.items():
        pairs = []
        for i in range(size):
            words = [rng.choice(source_words) for _ in range(rng.randint(3, 12))]
            target = [lexicon[w] for w in words]
            target.insert(1, target.pop())
            pairs.append(Pair(" ".join(words), " ".join(target), f"{split}{i // 20}"))
        splits[split] = pairs
    return splits


def make_corpus(args: argparse.Namespace, scale: CorpusSize, raw: Path, say: Say = print) -> str:
    """Write raw ``{split}.{de,en,catalog}`` from the catalogs under ``args.locale_dir`` in
    ``args.lang``; returns a one-line description of the source."""
    try:
        splits = build_corpus(args.locale_dir, args.lang, max_train=scale.max_train,
                              valid_per_mille=scale.heldout_per_mille,
                              test_per_mille=scale.heldout_per_mille)
        n_train = len(splits["train"])
        if n_train < MIN_GETTEXT_TRAIN_PAIRS or not splits["test"] or not splits["valid"]:
            raise FileNotFoundError(
                f"only {n_train} usable training pairs in the '{args.lang}' catalogs under "
                f"{args.locale_dir} (need {MIN_GETTEXT_TRAIN_PAIRS})")
        origin = (f"GNU gettext catalogs ({args.locale_dir}/{args.lang}/LC_MESSAGES/*.mo), "
                  f"{args.lang}->en")
    except FileNotFoundError as error:
        say(f"No usable gettext catalogs: {error}.\n"
            "Falling back to the GENERATED task (a made-up language pair: fixed lexicon plus "
            "one reordering rule). Its BLEU says nothing about real translation.")
        splits = generated_corpus(scale.generated_train)
        origin = "generated task (no gettext catalogs found)"
    splits["test"] = splits["test"][: scale.max_test]
    write_corpus(splits, raw, src=SRC, tgt=TGT)
    sizes = ", ".join(f"{k} {len(v)}" for k, v in splits.items())
    return f"{origin}: {sizes} sentence pairs"


def prepare(raw: Path, prep: Path, merges: int, say: Say = print) -> None:
    """Moses-tokenise + lower-case, learn a joint BPE, apply it into ``prep/sentences``."""
    tokenised = {}
    for split in ("train", "valid", "test"):
        for lang in (SRC, TGT):
            lines = read_lines(raw / f"{split}.{lang}")
            tokenised[split, lang] = moses_tokenize(lines, lang, lowercase=True)
            write_lines(prep / f"tok.{split}.{lang}", tokenised[split, lang])
    say(f"  tokenised {sum(len(v) for v in tokenised.values())} lines; learning {merges} "
        "BPE merges")
    codes = learn_bpe([prep / f"tok.train.{SRC}", prep / f"tok.train.{TGT}"],
                      prep / "bpe.codes", merges)
    encoder = BpeEncoder(codes)
    for (split, lang), lines in tokenised.items():
        write_lines(prep / "sentences" / f"{split}.{lang}", encoder.encode_lines(lines))
