"""The toy translation data: sentences and documents of one catalog's consecutive messages,
one dictionary (with the sentence separator) for every length, no test sentence trained on."""

from __future__ import annotations

from pathlib import Path

from scripts.reproduce.doc_corpus import SEPARATOR
from scripts.reproduce.kinds.translation import SRC, TGT, build_data
from scripts.reproduce.tables.toy_settings import TRANSLATION_TINY, TRANSLATION_TOY

from catalog_fixtures import write_fixture_catalogs


def test_documents_share_the_sentence_dictionary_and_keep_test_apart(tmp_path):
    locale = write_fixture_catalogs(tmp_path / "locale", "fr")
    settings = {**TRANSLATION_TOY, **TRANSLATION_TINY, "locale_dir": str(locale),
                "lengths": [32], "max_train_pairs": None, "max_test_docs": None}
    folder = tmp_path / "data"
    info = build_data(settings, folder)
    assert "sentences: train" in info["description"] and "docs32: train" in info["description"]
    raw, bin_ = folder / "raw", folder / "bin"
    dictionaries = {(bin_ / name / f"dict.{SRC}.txt").read_text() for name in ("sentences",
                                                                             "docs32")}
    assert len(dictionaries) == 1 and f"\n{SEPARATOR} 1\n" in dictionaries.pop()
    docs = (raw / "docs32" / f"train.{TGT}").read_text().splitlines()
    for doc in docs:
        parts = doc.split(f" {SEPARATOR} ")
        # within the limit unless a single sentence is longer
        assert len(parts) == 1 or sum(len(p.split()) for p in parts) <= 32
    # documents are the sentences, in order, joined
    sentences = (raw / "sentences" / f"train.{TGT}").read_text().splitlines()
    assert [p for doc in docs for p in doc.split(f" {SEPARATOR} ")] == sentences
    test = set((raw / "sentences" / f"test.{SRC}").read_text().splitlines())
    train = set((raw / "sentences" / f"train.{SRC}").read_text().splitlines())
    assert test and not test & train
    assert Path(bin_ / "docs32" / f"train.{SRC}-{TGT}.{SRC}.bin").stat().st_size > 0
