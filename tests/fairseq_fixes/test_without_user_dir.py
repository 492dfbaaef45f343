"""Without ``--user-dir relu_former`` nothing of the plugin runs: ``fairseq-generate`` on a
plugin checkpoint fails with torch's ``weights_only`` error, as the README and
docs/reliability.md quote it (they are the only help a user gets there)."""

from __future__ import annotations

import re

import pytest

from helpers import REPO_ROOT, fairseq_command, run_command

QUOTED = ("UnpicklingError: Weights only load failed", "Unsupported global: GLOBAL "
          "argparse.Namespace")


def flat(path: str) -> str:
    return re.sub(r"\s+", " ", (REPO_ROOT / path).read_text())


@pytest.mark.slow
def test_generate_without_user_dir_fails_as_the_docs_say(fairseq_run):
    fairseq_run.train(arch="relu_former")
    proc = run_command([
        fairseq_command("fairseq-generate"), fairseq_run.data_bin, "--path",
        fairseq_run.work / "checkpoints" / "checkpoint_last.pt", "--gen-subset", "test",
        "--cpu", "--num-workers", "0"], cwd=fairseq_run.work, check=False, fresh=True)
    assert proc.returncode == 1
    for text in QUOTED:
        assert text in proc.stderr, proc.stderr[-3000:]
    for doc in ("README.md", "docs/reliability.md"):
        found = flat(doc)
        assert all(text in found for text in QUOTED), doc
        assert "`--user-dir relu_former`" in found, doc
