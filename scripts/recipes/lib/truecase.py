"""Moses truecasing (``train-truecaser.perl`` / ``truecase.perl``) with ``sacremoses``.

G-Transformer's Europarl preparation truecases the tokenised text before BPE: a model learnt
on the training side of a language maps each word to its most frequent casing, counted where
the case carries information (not at the start of a sentence); applying it restores the
sentence-initial word to that casing ("The" -> "the", "Europe" stays "Europe").

    python -m scripts.recipes.lib.truecase --train train.en --model truecase-model.en \
        --inputs train.en valid.en test.en --outputs out/train.en out/valid.en out/test.en

Functions: ``train_truecaser(lines) -> MosesTruecaser``, ``truecase_lines(lines, truecaser)
-> list[str]``. Outputs are written under a temporary name and renamed when complete.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Sequence

from scripts.recipes.lib.prepare_text import read_lines, write_lines


def train_truecaser(lines: Sequence[str], save_to: str | Path | None = None):
    """A Moses truecaser learnt from tokenised ``lines`` (saved to ``save_to`` if given)."""
    from sacremoses import MosesTruecaser

    truecaser = MosesTruecaser()
    tokens = [line.split() for line in lines]
    if save_to is None:
        truecaser.train(tokens)
    else:
        tmp = Path(f"{save_to}.tmp.{os.getpid()}")
        truecaser.train(tokens, save_to=str(tmp))
        tmp.replace(save_to)
    return truecaser


def truecase_lines(lines: Sequence[str], truecaser) -> list[str]:
    """Each tokenised line truecased with ``truecaser`` (Moses ``truecase.perl``)."""
    return [truecaser.truecase(line, return_str=True) if line.strip() else line
            for line in lines]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scripts.recipes.lib.truecase",
                                     description=__doc__.split("\n\n")[1].replace("\n", " "))
    parser.add_argument("--train", required=True, help="tokenised text to learn casing from")
    parser.add_argument("--model", required=True, help="where the truecasing model is saved")
    parser.add_argument("--inputs", nargs="+", required=True, help="tokenised files to truecase")
    parser.add_argument("--outputs", nargs="+", required=True,
                        help="one output file per --inputs file")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if len(args.inputs) != len(args.outputs):
        raise SystemExit(f"truecase: error: --inputs has {len(args.inputs)} files, --outputs "
                         f"{len(args.outputs)}: give one output per input")
    truecaser = train_truecaser(read_lines(args.train), args.model)
    for source, target in zip(args.inputs, args.outputs):
        write_lines(target, truecase_lines(read_lines(source), truecaser))


if __name__ == "__main__":
    main()
