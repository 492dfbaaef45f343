"""Where the checkout is: the scripts run fairseq from its root with ``--user-dir relu_former``.

Every fairseq command the scripts start runs with the repository root as its working folder
and this checkout's plugin as its user dir, so a run never mixes two checkouts' code.
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
USER_DIR = str(REPO_ROOT / "relu_former")
