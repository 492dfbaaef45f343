"""Command-line settings for the tests that run two tables in one call (a row starting from,
or being, another table's row)."""

from __future__ import annotations

import json
from typing import Any, Dict, List

# one rate in a grid: a tiny model trains in seconds
GRID = {"lr_grid": [0.04], "lr_limits": [0.04, 0.04]}


def sets(values: Dict[str, Any], table: str = "") -> List[str]:
    """``--set KEY=VALUE`` for each of ``values`` (``--set TABLE:KEY=VALUE`` for ``table``)."""
    prefix = f"{table}:" if table else ""
    return [arg for key, value in values.items()
            for arg in ("--set", f"{prefix}{key}={json.dumps(value)}")]
