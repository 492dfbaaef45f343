"""The manual-page summarization corpus: roff reading, cleaning, splits, on real page files."""

from __future__ import annotations

import bz2
import gzip
import lzma
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.common.gettext_corpus import split_of
from scripts.demo import manpage_corpus as mc

from helpers import REPO_ROOT
from manpage_fixtures import fixture_pages, page_text, write_fixture_man_pages


@pytest.mark.parametrize("roff, text", [
    (r"\fBls\fR \fIfile\fP", "ls file"),
    (r"\f(CWcode\fR and \f[B]bold\f[]", "code and bold"),
    (r"\-\-all", "--all"),
    (r"a\(emb \(lqq\(rq \[lq]x\[rq]", 'a-b "q" "x"'),
    (r"caf\[u00E9]", "café"),
    (r"\*(lqquoted\*(rq", '"quoted"'),
    (r"\s-1SMALL\s0 \s+2big\s0", "SMALL big"),
    (r"\&.dot and back\e slash", ".dot and back\\ slash"),
    (r"text \" a comment", "text "),
    (r"non\ breaking\~space", "non breaking space"),
    (r"width\w'abc' \h'1m'gone", "width gone"),
])
def test_unescape_resolves_roff_escapes(roff, text):
    assert mc.unescape(roff) == text


def test_sections_keep_macro_words_and_drop_requests_definitions_and_tables():
    source = "\n".join([
        '.\\" comment line',
        ".TH T 1",
        ".de XX", "macro body, not prose", "..",
        ".ig", "ignored block", "..",
        ".SH NAME", r"t \- do a thing",
        '.SH "SEE ALSO"',
        ".BR ls (1),",
        ".B \"two words\"",
        ".IP \\(bu 2", "item",
        ".TS", "allbox;", "l l.", "cell1\tcell2", ".TE",
        ".nr X 1", ".if n .ds Y z", "tail",
    ])
    sections = mc.roff_sections(source)
    assert sections == [("NAME", "t - do a thing"),
                        ("SEE ALSO", "ls(1), two words * item cell1 cell2 tail")]


@pytest.mark.parametrize("source, reason", [
    (".so man1/other.1\n", ".so"),
    (".Dd January 1, 2024\n.Sh NAME\n.Nm x\n.Nd y\n", "mdoc"),
])
def test_links_and_mdoc_pages_are_refused(source, reason):
    with pytest.raises(mc.ManPageError, match=reason):
        mc.roff_sections(source)


def test_a_page_gives_its_body_without_the_name_section(tmp_path):
    man = write_fixture_man_pages(tmp_path / "man")
    doc = mc.parse_page(man / "man1" / "remove-printer0.1.gz")
    assert doc.summary == "remove a printer queue"
    assert doc.page == "remove-printer0.1"
    assert doc.text.startswith("synopsis: remove-printer0 [-f] [--force] OBJECT...")
    assert "description: remove-printer0 will remove the printer queue named" in doc.text
    assert "options: -f, --force remove the printer queue even when it is in use." in doc.text
    assert '"printer queue" must exist' in doc.text
    assert "see also: ls(1), man(7)" in doc.text
    for leaked in ("\\f", "\\-", "\\(", "comment", "macro body", ".TP", "name:"):
        assert leaked not in doc.text


@pytest.mark.parametrize("compress", [gzip.compress, bz2.compress, lzma.compress, bytes])
def test_compressed_and_plain_pages_read_the_same(tmp_path, compress):
    path = tmp_path / "page.1"
    text = page_text("copy-mail", "copy", "mail folder")
    path.write_bytes(compress(text.encode("utf-8")))
    assert mc.parse_page(path).summary == "copy a mail folder"
    latin = tmp_path / "latin.1"
    latin.write_bytes(text.replace("copy a mail", "copy a caf\u00e9 mail").encode("latin-1"))
    assert mc.parse_page(latin).summary == "copy a caf\u00e9 mail folder"


def test_corpus_cleans_deduplicates_and_splits_by_the_summary(tmp_path):
    man = write_fixture_man_pages(tmp_path / "man")
    said = []
    splits = mc.build_corpus(man, min_words=20, valid_per_mille=150, test_per_mille=150,
                             log=said.append)
    docs = [d for split in splits.values() for d in split]
    # every regular page and the plain man8 page; the duplicate, link, mdoc, no-NAME skipped
    assert len(docs) == len(fixture_pages()) + 1
    assert "plain-page.8" in {d.page for d in docs}
    summaries = [d.summary for d in docs]
    assert len(set(summaries)) == len(summaries)
    for split, split_docs in splits.items():
        for doc in split_docs:
            assert split_of(doc.summary, 150, 150) == split
            assert doc.text == doc.text.lower() and "  " not in doc.text
    assert all(splits.values())
    report = said[-1]
    for reason in ("1 a link (.so)", "1 no NAME section", "1 same summary as an earlier page",
                   "1 written in the BSD mdoc macros"):
        assert reason in report


def test_split_is_stable_when_pages_are_added(tmp_path):
    small, large = tmp_path / "small", tmp_path / "large"
    for name, verb, obj in fixture_pages()[:30]:
        (small / "man1").mkdir(parents=True, exist_ok=True)
        (small / "man1" / f"{name}.1").write_text(page_text(name, verb, obj))
    write_fixture_man_pages(large)

    def where(man: Path) -> dict:
        splits = mc.build_corpus(man, min_words=20, valid_per_mille=150, test_per_mille=150)
        return {d.summary: split for split, docs in splits.items() for d in docs}

    before, after = where(small), where(large)
    assert before and all(after[summary] == split for summary, split in before.items())


def test_length_and_summary_filters(tmp_path):
    man = write_fixture_man_pages(tmp_path / "man", repeat=0)
    short = mc.build_corpus(man, min_words=200)
    assert not any(short.values())
    capped = mc.build_corpus(man, min_words=20, max_train=10)
    assert len(capped["train"]) == 10
    assert mc.build_corpus(man, min_words=20, max_summary_words=2) == {
        "train": [], "valid": [], "test": []}


def test_write_corpus_and_cli(tmp_path):
    man = write_fixture_man_pages(tmp_path / "man")
    out = tmp_path / "corpus"
    proc = subprocess.run([sys.executable, "-m", "scripts.demo.manpage_corpus", "--man-dir",
                           str(man), "--out", str(out), "--min-words", "20"],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    counts = {}
    for split in mc.SPLITS:
        columns = [(out / f"{split}.{suffix}").read_text().splitlines()
                   for suffix in ("doc", "sum", "page")]
        assert len({len(c) for c in columns}) == 1
        counts[split] = len(columns[0])
    assert f"train {counts['train']}, valid {counts['valid']}, test {counts['test']}" in proc.stdout
    assert not list(out.glob(".*tmp*"))


def test_no_pages_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no manual pages under"):
        mc.build_corpus(tmp_path / "nothing")
    proc = subprocess.run([sys.executable, "-m", "scripts.demo.manpage_corpus", "--man-dir",
                           str(tmp_path / "nothing"), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert proc.returncode == 2
    assert "error: no manual pages under" in proc.stderr and "--man-dir" in proc.stderr
