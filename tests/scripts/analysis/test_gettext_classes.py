"""The gettext-domain classification corpus: cleaning, ambiguity, class filters, splits."""

from __future__ import annotations

import sys
from collections import Counter

import pytest

from scripts.analysis.gettext_classes import build_examples, main, tokenize
from scripts.common.gettext_corpus import split_of

from catalog_fixtures import write_mo
from domain_catalogs import DOMAINS, domain_messages, write_domain_catalogs
from helpers import run_command


@pytest.fixture
def locale_dir(tmp_path):
    return write_domain_catalogs(tmp_path / "locale")


def all_examples(splits):
    return [e for examples in splits.values() for e in examples]


def test_every_domain_is_a_class_with_its_messages_from_all_languages(locale_dir):
    splits, stats = build_examples(locale_dir, min_per_class=10)
    examples = all_examples(splits)
    assert Counter(e.label for e in examples) == {d: 72 for d in DOMAINS} | {"imgview": 73}
    # de holds messages 0-59 and fr 55-71: the union has them all, each once
    for domain in DOMAINS:
        texts = {e.text for e in examples if e.label == domain}
        assert {tokenize(m, 32) for m, _ in domain_messages(domain)} <= texts
    assert stats.catalogs == 9 and stats.unreadable == 0
    assert stats.ambiguous == 1  # "Cancel the operation" in netutil and dbtool
    assert not any("cancel" in e.text for e in examples)
    assert stats.no_words == 1  # "%s: %d"
    assert stats.small_classes == 1 and stats.small_class_examples == 1  # tinytool
    assert "open the picture" in {e.text for e in examples}  # accelerator removed


def test_splits_are_stable_disjoint_and_by_hash(locale_dir):
    splits, _ = build_examples(locale_dir, min_per_class=10, valid_per_mille=150,
                               test_per_mille=150)
    again, _ = build_examples(locale_dir, min_per_class=10, valid_per_mille=150,
                              test_per_mille=150)
    assert splits == again
    for name, examples in splits.items():
        assert examples, name
        assert all(split_of(e.text, 150, 150) == name for e in examples)
    texts = [e.text for e in all_examples(splits)]
    assert len(texts) == len(set(texts))


def test_per_class_cap_keeps_a_stable_subset(locale_dir):
    full = set(all_examples(build_examples(locale_dir, min_per_class=10)[0]))
    splits, stats = build_examples(locale_dir, min_per_class=10, max_per_class=30)
    capped = all_examples(splits)
    assert Counter(e.label for e in capped) == {d: 30 for d in DOMAINS}
    assert set(capped) <= full
    assert stats.capped == 4 * 42 + 1
    # a class below the minimum is dropped whatever the cap
    assert "tinytool" not in {e.label for e in capped}


def test_a_language_filter_and_an_unreadable_catalog(locale_dir):
    (locale_dir / "de" / "LC_MESSAGES" / "broken.mo").write_bytes(b"not a catalog at all, "
                                                                  b"just some bytes")
    messages = []
    splits, stats = build_examples(locale_dir, langs=["fr"], min_per_class=10,
                                   log=messages.append)
    assert Counter(e.label for e in all_examples(splits)) == {d: 17 for d in DOMAINS}
    assert stats.unreadable == 0  # broken.mo is under de
    splits, stats = build_examples(locale_dir, min_per_class=10, log=messages.append)
    assert stats.unreadable == 1 and any("broken.mo" in m for m in messages)


def test_tokenize_splits_punctuation_lowercases_and_truncates():
    assert tokenize("Could NOT open '%s': file exists!", 32) == (
        "could not open ' % s ' : file exists !")
    assert tokenize("one two three four", 2) == "one two"


def test_cli_writes_aligned_files_and_names_bad_flags(locale_dir, tmp_path):
    out = tmp_path / "corpus"
    assert main(["--locale-dir", str(locale_dir), "--out", str(out),
                 "--min-per-class", "10"]) == 0
    for split in ("train", "valid", "test"):
        inputs = (out / f"{split}.input0").read_text().splitlines()
        labels = (out / f"{split}.label").read_text().splitlines()
        assert len(inputs) == len(labels) > 0
        assert set(labels) <= set(DOMAINS)
    rows = (out / "classes.tsv").read_text().splitlines()
    assert rows[0] == "label\ttrain\tvalid\ttest" and len(rows) == 1 + len(DOMAINS)
    assert not list(out.glob("*.tmp")) and not list(out.glob(".*"))
    for flags, message in [(["--min-per-class", "1"], "--min-per-class must be >= 3"),
                           (["--max-per-class", "5"], "--max-per-class (5) must be >="),
                           (["--test-per-mille", "0"], "--valid-per-mille and --test-per-mille")]:
        proc = run_command([sys.executable, "-m", "scripts.analysis.gettext_classes", "--out",
                            tmp_path / "x", "--locale-dir", locale_dir, *flags], check=False)
        assert proc.returncode == 2 and message in proc.stderr.strip().splitlines()[-1]
    empty = tmp_path / "empty"
    write_mo(empty / "de" / "LC_MESSAGES" / "a.mo", [("Only one message here", "x")])
    proc = run_command([sys.executable, "-m", "scripts.analysis.gettext_classes", "--out",
                        tmp_path / "y", "--locale-dir", empty], check=False)
    assert proc.returncode == 2 and "lower --min-per-class" in proc.stderr
    proc = run_command([sys.executable, "-m", "scripts.analysis.gettext_classes", "--out",
                        tmp_path / "z", "--locale-dir", tmp_path / "nowhere"], check=False)
    assert proc.returncode == 2 and "no gettext catalogs" in proc.stderr
