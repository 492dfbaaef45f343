"""``fairseq-generate --truncate-source`` cuts sources at the checkpoint's own
``--max-source-positions`` unless the flag is typed again."""

from __future__ import annotations

import re

import pytest


def source_lengths(stdout: str) -> list[int]:
    return [len(line.split()) for line in re.findall(r"^S-\d+\t(.*)$", stdout, flags=re.M)]


@pytest.mark.slow
def test_truncate_source_at_generate_cuts_at_the_checkpoints_limit(fairseq_run):
    """Trained with --max-source-positions 8; the test split has sources of up to 10 words.
    fairseq used to cut at its default 1024, then stop at the first source too long for the
    model."""
    fairseq_run.train("--max-source-positions", "8", "--truncate-source", arch="relu_former")
    proc = fairseq_run.generate("--truncate-source")
    lengths = source_lengths(proc.stdout)
    assert len(lengths) == 20 and max(lengths) == 7  # 7 words and the end of sentence
    assert ("--max-source-positions not given: using the checkpoint's 8"
            in proc.stdout + proc.stderr)
    typed = fairseq_run.generate("--truncate-source", "--max-source-positions", "6")
    lengths = source_lengths(typed.stdout)
    assert len(lengths) == 20 and max(lengths) == 5
    assert "not given" not in typed.stdout + typed.stderr
