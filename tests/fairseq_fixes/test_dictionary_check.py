"""Fine-tuning on data whose dictionary lists the words in another order than the checkpoint's
is refused (the embeddings would belong to other words) unless --accept-dictionary-change."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import relu_former.plugin  # noqa: F401  (the allowlist torch.load needs here)
from relu_former.fairseq_fixes.dictionary_check import (
    KEY,
    checkpoint_dictionaries,
    dictionary_difference,
)

from helpers import FairseqRun


def test_dictionary_difference():
    base = ["<s>", "<pad>", "</s>", "<unk>", "der", "die", "das"]
    assert dictionary_difference(base, list(base)) is None
    swapped = base[:4] + ["die", "der", "das"]
    assert dictionary_difference(base, swapped) == (
        "it holds the same symbols in another order: 2 of 7 indices differ (index 4 is 'der' "
        "in the checkpoint, 'die' here)")
    other = base[:6] + ["ein"]
    assert "other symbols: 1 of 7 indices differ (index 6 is 'das'" in \
        dictionary_difference(base, other)
    assert dictionary_difference(base, base + ["ein"]) == \
        "it has 8 symbols, the checkpoint's has 7"


def _reordered_copy(data_bin: Path, dest: Path) -> Path:
    """The same binarized data with two words of the joined dictionary swapped: same size,
    same token ids, but ids 4 and 5 now stand for each other's word."""
    shutil.copytree(data_bin, dest)
    for lang in ("de", "en"):
        path = dest / f"dict.{lang}.txt"
        lines = path.read_text(encoding="utf-8").splitlines()
        lines[0], lines[1] = lines[1], lines[0]  # the file starts at index 4 (after specials)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dest


@pytest.mark.slow
def test_fine_tuning_on_a_reordered_dictionary_is_refused(fairseq_run: FairseqRun, tmp_path):
    fairseq_run.train()
    pretrained = fairseq_run.work / "checkpoints" / "checkpoint_last.pt"
    recorded = checkpoint_dictionaries(str(pretrained))
    assert set(recorded) == {"source", "target"} and recorded["source"][4:6]  # saved in it
    import torch

    assert KEY in torch.load(pretrained, map_location="cpu", weights_only=True)

    reordered = FairseqRun(data_bin=_reordered_copy(fairseq_run.data_bin, tmp_path / "bin2"),
                           work=fairseq_run.work)
    refused = reordered.train("--finetune-from-model", str(pretrained), save_dir="tuned",
                              check=False)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "Traceback" not in refused.stderr
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("fairseq-train: error: --finetune-from-model: the source dictionary "
                           "of the data does not match the one"), last
    assert "the same symbols in another order: 2 of" in last
    assert "--accept-dictionary-change" in last
    assert not (fairseq_run.work / "tuned" / "checkpoint_last.pt").exists()

    accepted = reordered.train("--finetune-from-model", str(pretrained),
                               "--accept-dictionary-change", "--max-update", "2",
                               save_dir="tuned")
    assert "loaded anyway: --accept-dictionary-change" in accepted.stdout + accepted.stderr
