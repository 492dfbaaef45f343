"""Fine-tuning on data whose dictionary lists other words, or the words in another order, than
the checkpoint's is refused (the embeddings would belong to other words) unless
--accept-dictionary-change, which gives each word its own row."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

import relu_former.plugin  # noqa: F401  (the allowlist torch.load needs here)
from relu_former.fairseq_fixes.dictionary_check import (
    KEY,
    checkpoint_dictionaries,
    dictionary_difference,
    move_embedding_rows,
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


def _reordered_copy(data_bin: Path, dest: Path, new_words: int = 0) -> Path:
    """The same binarized data with two words of the joined dictionary swapped: same token
    ids, but ids 4 and 5 now stand for each other's word; ``new_words`` words the data never
    uses are added at the end (another size)."""
    shutil.copytree(data_bin, dest)
    for lang in ("de", "en"):
        path = dest / f"dict.{lang}.txt"
        lines = path.read_text(encoding="utf-8").splitlines()
        lines[0], lines[1] = lines[1], lines[0]  # the file starts at index 4 (after specials)
        lines += [f"neuwort{i} 1" for i in range(new_words)]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dest


def _rows(path: Path) -> tuple[list[str], torch.Tensor]:
    """The source symbols a checkpoint records and its encoder's embedding rows."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    return state[KEY]["source"], state["model"]["encoder.embed_tokens.weight"].double()


@pytest.mark.slow
def test_fine_tuning_on_another_dictionary(fairseq_run: FairseqRun, tmp_path):
    fairseq_run.train()
    pretrained = fairseq_run.work / "checkpoints" / "checkpoint_last.pt"
    recorded = checkpoint_dictionaries(torch.load(pretrained, map_location="cpu"))
    assert set(recorded) == {"source", "target"} and recorded["source"][4:6]  # saved in it

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
    assert "or pass --accept-dictionary-change to start from it anyway, each word's " \
           "embedding row moved to its index here" in last, last
    assert not (fairseq_run.work / "tuned" / "checkpoint_last.pt").exists()

    # another size and another order: the advice works, and every word keeps its own row
    other = FairseqRun(data_bin=_reordered_copy(fairseq_run.data_bin, tmp_path / "bin3", 3),
                       work=fairseq_run.work)
    resumed = other.train("--restore-file", str(pretrained), "--accept-dictionary-change",
                          save_dir="resumed", check=False)
    assert resumed.returncode == 2, resumed.stderr[-3000:]
    assert "add --reset-optimizer, or fine-tune with --finetune-from-model" in \
        resumed.stderr.strip().splitlines()[-1]
    tuned = other.train("--finetune-from-model", str(pretrained), "--accept-dictionary-change",
                        "--lr", "1e-9", "--max-update", "1", save_dir="tuned")
    log = tuned.stdout + tuned.stderr
    assert "each word's embedding row is moved to its index here" in log, log[-3000:]
    assert "words keep their rows, 3 new ones start from fresh rows" in log, log[-3000:]
    old_symbols, old_rows = _rows(pretrained)
    new_symbols, new_rows = _rows(fairseq_run.work / "tuned" / "checkpoint_last.pt")
    assert len(new_symbols) == len(old_symbols) + 3 and new_symbols[4:6] == old_symbols[5:3:-1]
    index = {symbol: i for i, symbol in enumerate(old_symbols)}
    moved = torch.stack([old_rows[index[symbol]] for symbol in new_symbols[:len(old_symbols)]])
    # one update at lr 1e-9 moves no weight by more than about 1e-9
    assert torch.allclose(new_rows[:len(old_symbols)], moved, atol=1e-6, rtol=0)
    assert not torch.allclose(new_rows[4], old_rows[4], atol=1e-3, rtol=0)  # rows did move


def test_move_embedding_rows_gives_each_word_its_row():
    """float64 tables, a shared one among them: a word of both dictionaries gets its saved
    row, a new word the model's own initial row."""
    from torch import nn

    saved, current = ["<s>", "a", "b", "c"], ["<s>", "c", "a", "d", "b"]
    model = nn.Module()
    model.encoder, model.decoder = nn.Module(), nn.Module()
    model.encoder.embed_tokens = nn.Embedding(5, 3).double()
    model.decoder.embed_tokens = model.encoder.embed_tokens
    model.decoder.output_projection = nn.Linear(3, 5, bias=True).double()
    fresh = {k: v.clone() for k, v in model.state_dict().items()}
    old = torch.arange(12, dtype=torch.float64).reshape(4, 3)
    weights = {"encoder.embed_tokens.weight": old.clone(), "decoder.embed_tokens.weight": old,
               "decoder.output_projection.weight": old * 2,
               "decoder.output_projection.bias": torch.arange(4, dtype=torch.float64)}
    done = move_embedding_rows(weights, model, {"source": (saved, current),
                                                "target": (saved, current)})
    assert len(done) == 4 and all("4 of 5 words keep their rows, 1 new" in d for d in done)
    order = [0, 3, 1, None, 2]  # where each current word was in the checkpoint
    for key, base in (("encoder.embed_tokens.weight", old), ("decoder.embed_tokens.weight", old),
                      ("decoder.output_projection.weight", old * 2),
                      ("decoder.output_projection.bias", torch.arange(4.0).double())):
        for row, was in enumerate(order):
            expected = fresh[key][row] if was is None else base[was]
            assert torch.equal(weights[key][row], expected), (key, row)
    model.load_state_dict(weights)  # the shapes are the model's
