"""Documents are consecutive messages of one catalog, packed without splitting a sentence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from scripts.common.gettext_corpus import Pair
from scripts.reproduce.doc_corpus import pack_documents, split_documents

REPO_ROOT = Path(__file__).resolve().parents[3]


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


SPLIT_IN_A_NEW_PROCESS = """
import json, sys
from tests.scripts.reproduce.test_doc_corpus import documents
from scripts.reproduce.doc_corpus import split_documents
print(json.dumps({name: [d.pairs[0].source for d in docs]
                  for name, docs in split_documents(documents(), 50, 150).items()}))
"""


def documents():
    return pack_documents(pairs("a", [2] * 300) + pairs("b", [2] * 300), max_tokens=4)


def sources(splits):
    return {name: sorted(d.pairs[0].source for d in docs) for name, docs in splits.items()}


def test_a_documents_split_depends_on_that_document_alone(tmp_path):
    """Each document lands in one split, chosen from its own catalog and first sentence: the
    same in another process (another hash seed), in any order, with any other documents,
    and in about the proportions asked for."""
    docs = documents()
    splits = split_documents(docs, 50, 150)
    assert sorted(d for part in sources(splits).values() for d in part) == sorted(
        d.pairs[0].source for d in docs)  # each document exactly once
    # 300 documents: 15 valid and 45 test expected; bounds at about 4 standard deviations
    assert 3 <= len(splits["valid"]) <= 32 and 20 <= len(splits["test"]) <= 70
    where = {source: name for name, part in sources(splits).items() for source in part}
    subset = split_documents(list(reversed(docs))[::3], 50, 150)
    assert all(where[source] == name for name, part in sources(subset).items()
               for source in part)
    for seed in ("1", "2"):
        other = subprocess.run([sys.executable, "-c", SPLIT_IN_A_NEW_PROCESS], cwd=REPO_ROOT,
                               env={**os.environ, "PYTHONHASHSEED": seed}, check=True,
                               capture_output=True, text=True)
        assert {name: sorted(part) for name, part in
                json.loads(other.stdout).items()} == sources(splits)
