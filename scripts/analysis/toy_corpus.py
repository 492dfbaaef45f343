"""A generated toy translation task, learnable in a few updates, for tests and tools: source
word ``w<i>`` is target word ``v<i>``, in reversed order (attention has something to learn).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Mapping

DEFAULT_SIZES = {"train": 200, "valid": 20, "test": 20}


def write_toy_parallel_corpus(folder: Path, sizes: Mapping[str, int] | None = None,
                              vocab: int = 30, min_len: int = 3, max_len: int = 10,
                              seed: int = 0, src: str = "de", tgt: str = "en") -> Path:
    """Write ``{split}.{src}`` and ``{split}.{tgt}`` for every split of ``sizes`` in ``folder``."""
    rng = random.Random(seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for split, size in (DEFAULT_SIZES if sizes is None else sizes).items():
        src_lines, tgt_lines = [], []
        for _ in range(size):
            words = [rng.randrange(vocab) for _ in range(rng.randint(min_len, max_len))]
            src_lines.append(" ".join(f"w{i}" for i in words))
            tgt_lines.append(" ".join(f"v{i}" for i in reversed(words)))
        (folder / f"{split}.{src}").write_text("\n".join(src_lines) + "\n")
        (folder / f"{split}.{tgt}").write_text("\n".join(tgt_lines) + "\n")
    return folder
