"""Where fairseq's console scripts (``fairseq-train``, ``fairseq-generate``, ...) are.

The scripts and tests run fairseq as a user would, through its console scripts. The one to
run is the one installed beside the running interpreter (the virtual environment's), so that
a ``python -m scripts...`` started with ``.venv/bin/python`` never picks up another fairseq
that happens to be first on ``PATH``; ``PATH`` is the fall-back for installs that put the
scripts elsewhere. ``scripts/recipes/lib/recipe.sh`` (``fairseq_cli``) follows the same order
for the interpreter it runs.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def fairseq_command(name: str) -> str:
    """Path of the fairseq console script ``name``: beside ``sys.executable``, else on PATH.

    Exits with a message naming the script and the fix when neither has it.
    """
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} not found beside {sys.executable} nor on PATH: install "
                         "fairseq there (`make install`)")
    return found
