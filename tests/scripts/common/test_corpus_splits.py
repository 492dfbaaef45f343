"""The corpus builders' shared split flags, hash-chosen subset and atomic split writer."""

import argparse

import pytest

from scripts.common.corpus_splits import (
    add_split_args,
    check_split_args,
    hash_subset,
    write_split_columns,
)


def split_parser(minimum: int) -> tuple[argparse.ArgumentParser, callable]:
    parser = argparse.ArgumentParser(prog="builder")
    add_split_args(parser, "pairs", valid=15, test=20, max_train=True)

    def parse(argv):
        args = parser.parse_args(argv)
        check_split_args(parser, args, minimum=minimum)
        return args

    return parser, parse


def test_split_flags_defaults_and_values():
    _, parse = split_parser(minimum=0)
    args = parse([])
    assert (args.valid_per_mille, args.test_per_mille, args.max_train) == (15, 20, None)
    args = parse(["--valid-per-mille", "0", "--test-per-mille", "999", "--max-train", "7"])
    assert (args.valid_per_mille, args.test_per_mille, args.max_train) == (0, 999, 7)


@pytest.mark.parametrize("minimum, argv", [
    (0, ["--valid-per-mille", "-1"]),
    (0, ["--valid-per-mille", "500", "--test-per-mille", "500"]),
    (1, ["--test-per-mille", "0"]),
])
def test_bad_split_shares_are_one_line_errors_naming_the_flags(minimum, argv, capsys):
    _, parse = split_parser(minimum)
    with pytest.raises(SystemExit) as exit_info:
        parse(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"--valid-per-mille and --test-per-mille must be >= {minimum}" in err


def test_hash_subset_keeps_the_lowest_hashes_in_their_order():
    items = [f"line {i}" for i in range(50)]
    kept = hash_subset(items, str, 10)
    assert len(kept) == 10 and kept == [item for item in items if item in kept]
    assert hash_subset(list(reversed(items)), str, 10) == list(reversed(kept))
    assert hash_subset(items, str, None) == items and hash_subset(items, str, 50) == items


def test_write_split_columns_writes_one_file_per_split_and_column(tmp_path):
    splits = {"train": [("a b", "x"), ("c", "y")], "valid": [], "test": [("ü", "z")]}
    out = write_split_columns(tmp_path / "new", splits, {"src": lambda e: e[0],
                                                         "tgt": lambda e: e[1]})
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{split}.{suffix}" for split in splits for suffix in ("src", "tgt"))
    assert (out / "train.src").read_text(encoding="utf-8") == "a b\nc\n"
    assert (out / "valid.tgt").read_text(encoding="utf-8") == ""
    assert (out / "test.src").read_text(encoding="utf-8") == "ü\n"
