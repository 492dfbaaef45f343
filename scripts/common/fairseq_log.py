"""Reading fairseq's ``--log-format json`` output: one record a line, e.g.
``... | INFO | train_inner | {"epoch": 1, "loss": "12.2", ...}``, values as strings.
"""

from __future__ import annotations

import json
import re
from typing import Iterable

_RECORD = re.compile(r"\| (train_inner|train|valid) \| (\{.*\})\s*$")


def parse_json_log_line(line: str) -> tuple[str, dict] | None:
    """``(tag, record)`` of one json log line, or None for any other line."""
    match = _RECORD.search(line)
    if match is None:
        return None
    return match.group(1), json.loads(match.group(2))


def json_log_records(lines: Iterable[str], tag: str) -> list[dict]:
    """Every record of kind ``tag`` (``train_inner``, ``train``, ``valid``) in ``lines``."""
    return [parsed[1] for parsed in map(parse_json_log_line, lines)
            if parsed is not None and parsed[0] == tag]
