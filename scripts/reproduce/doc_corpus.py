"""Document-level translation data from the gettext catalogs: consecutive messages of one
catalog (roughly source order: shared vocabulary and topic) packed into documents
G-Transformer's way, whole pairs until the English side would pass ``max_tokens``, joined by
``SEPARATOR``. Splits are per document, by a hash of its catalog and first sentence, so no
test sentence is trained on, by the document models or the sentence models they start from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence

from scripts.common.gettext_corpus import Pair, split_of

SEPARATOR = "<sep>"


@dataclass(frozen=True)
class Document:
    """Consecutive sentence pairs of one catalog."""

    catalog: str
    pairs: tuple[Pair, ...]

    def side(self, source: bool) -> str:
        return f" {SEPARATOR} ".join(p.source if source else p.target for p in self.pairs)


def pack_documents(pairs: Sequence[Pair], max_tokens: int) -> List[Document]:
    """Pack consecutive pairs of each catalog into documents of at most ``max_tokens``
    English words."""
    documents: List[Document] = []
    current: List[Pair] = []
    size = 0
    for pair in pairs:
        n = len(pair.target.split())
        if current and (pair.catalog != current[0].catalog or size + n > max_tokens):
            documents.append(Document(current[0].catalog, tuple(current)))
            current, size = [], 0
        current.append(pair)
        size += n
    if current:
        documents.append(Document(current[0].catalog, tuple(current)))
    return documents


def split_documents(documents: Sequence[Document], valid_per_mille: int,
                    test_per_mille: int) -> Dict[str, List[Document]]:
    """Train/valid/test by a hash of each document's catalog and first English sentence."""
    splits: Dict[str, List[Document]] = {"train": [], "valid": [], "test": []}
    for doc in documents:
        key = f"{doc.catalog}\t{doc.pairs[0].target}"
        splits[split_of(key, valid_per_mille, test_per_mille)].append(doc)
    return splits
