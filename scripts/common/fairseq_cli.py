"""Where fairseq's console scripts are: beside the running interpreter first, so that a
script started with ``.venv/bin/python`` never runs another fairseq first on ``PATH``
(``scripts/recipes/lib/recipe.sh`` follows the same order).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def fairseq_command(name: str) -> str:
    """Path of the fairseq console script ``name``; exits naming the fix where none is."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} not found beside {sys.executable} nor on PATH: install "
                         "fairseq there (`make install`)")
    return found
