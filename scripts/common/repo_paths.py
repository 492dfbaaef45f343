"""Where the checkout is, and at which commit: the scripts run fairseq from its root with
this checkout's plugin as ``--user-dir``, so a run never mixes two checkouts' code.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
USER_DIR = str(REPO_ROOT / "relu_former")


def git_commit(folder: Path = REPO_ROOT) -> str:
    """The checked-out commit (short hash), marked when tracked files have changes."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=folder,
                                capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=folder, capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return f"{commit} (with uncommitted changes)" if dirty else commit
