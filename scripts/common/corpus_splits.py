"""Train/valid/test splits of the corpus builders: the split flags, a hash-chosen subset and
one text file per split and column.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path
from typing import Callable, Mapping, Sequence, TypeVar

from scripts.common.atomic_files import write_text_atomic

T = TypeVar("T")


def corpus_parser(doc: str, out_files: str) -> argparse.ArgumentParser:
    """A corpus builder's parser, with ``--out`` (the folder for ``out_files``)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help=f"output folder for {out_files}")
    return parser


def build_and_write(build: Callable[[], Mapping[str, Sequence[T]]],
                    write: Callable[[Mapping[str, Sequence[T]]], Path],
                    report: Callable[[str], str]) -> int:
    """Build, write and report the splits; a missing input is one line and status 2."""
    try:
        splits = build()
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    write(splits)
    print(report(", ".join(f"{name} {len(items)}" for name, items in splits.items())))
    return 0


def add_split_args(parser: argparse.ArgumentParser, unit: str, valid: int, test: int,
                   max_train: bool = False) -> None:
    """``--valid-per-mille``, ``--test-per-mille`` and, with ``max_train``, ``--max-train``."""
    for split, default in (("valid", valid), ("test", test)):
        parser.add_argument(f"--{split}-per-mille", type=int, default=default,
                            help=f"share of {unit} in {split}, per thousand "
                                 "(default: %(default)s)")
    if max_train:
        parser.add_argument("--max-train", type=int, default=None,
                            help=f"keep at most this many training {unit} (a hash-chosen "
                                 "subset)")


def check_split_args(parser: argparse.ArgumentParser, args: argparse.Namespace,
                     minimum: int = 0) -> None:
    """``parser.error`` unless both shares are at least ``minimum`` and leave train a part."""
    valid, test = args.valid_per_mille, args.test_per_mille
    if min(valid, test) < minimum or valid + test >= 1000:
        parser.error(f"--valid-per-mille and --test-per-mille must be >= {minimum} and sum "
                     f"below 1000, got {valid} and {test}")


def hash_subset(items: Sequence[T], key: Callable[[T], str], limit: int | None) -> list[T]:
    """At most ``limit`` of ``items``, the ones whose key hashes lowest, in their order."""
    if limit is None or len(items) <= limit:
        return list(items)
    ranked = sorted(range(len(items)),
                    key=lambda i: hashlib.sha1(key(items[i]).encode("utf-8")).hexdigest())
    keep = set(ranked[:limit])
    return [item for i, item in enumerate(items) if i in keep]


def write_split_columns(out: str | Path, splits: Mapping[str, Sequence[T]],
                        columns: Mapping[str, Callable[[T], str]]) -> Path:
    """Write ``OUT/{split}.{suffix}`` for every split and ``suffix -> field`` of ``columns``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for split, examples in splits.items():
        for suffix, field in columns.items():
            write_text_atomic(out / f"{split}.{suffix}",
                              "".join(field(example) + "\n" for example in examples))
    return out
