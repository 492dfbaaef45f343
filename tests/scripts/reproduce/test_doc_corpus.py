"""Documents are consecutive messages of one catalog, packed without splitting a sentence."""

from __future__ import annotations

from scripts.common.gettext_corpus import Pair
from scripts.reproduce.doc_corpus import pack_documents, split_documents


def pairs(catalog: str, lengths):
    return [Pair(f"s{catalog}{i}", " ".join([f"w{i}"] * n), catalog)
            for i, n in enumerate(lengths)]


def test_packing_keeps_order_and_catalogs_and_the_limit():
    items = pairs("a", [3, 4, 2, 5]) + pairs("b", [1, 1])
    docs = pack_documents(items, max_tokens=7)
    assert [[p.source for p in d.pairs] for d in docs] == [
        ["sa0", "sa1"], ["sa2", "sa3"], ["sb0", "sb1"]]
    assert all(sum(len(p.target.split()) for p in d.pairs) <= 7 for d in docs)
    # every pair once, in order
    assert [p for d in docs for p in d.pairs] == items


def test_a_sentence_longer_than_the_limit_is_a_document_of_its_own():
    docs = pack_documents(pairs("a", [2, 20, 2]), max_tokens=5)
    assert [len(d.pairs) for d in docs] == [1, 1, 1]
    assert len(docs[1].side(source=False).split()) == 20


def test_split_is_deterministic_and_disjoint():
    docs = pack_documents(pairs("a", [2] * 300) + pairs("b", [2] * 300), max_tokens=4)
    first = split_documents(docs, 100, 100)
    again = split_documents(docs, 100, 100)
    assert first == again
    seen = [id(d) for split in first.values() for d in split]
    assert len(seen) == len(set(seen)) == len(docs)
    assert first["valid"] and first["test"] and len(first["train"]) > len(first["test"])
