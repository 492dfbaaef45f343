"""Checkpoints written before the flags were renamed still load and decode identically.

The fixtures ``fixtures/old_*.pt`` are tiny relu_former models (width 16, one layer each
side) saved in fairseq's checkpoint format by the code of main at commit 23bebdb, with the
old flag spellings in their saved arguments (``--attention-kernel fused|reference``,
``--attention-key-chunk-size`` with the fused kernel, which ignored it), together with the
logits and beam-search hypotheses that code produced for fixed inputs. Loading goes through
``checkpoint_utils.load_checkpoint_to_cpu`` (the path of ``fairseq-generate``).
"""

from pathlib import Path

import pytest
import torch
from fairseq import checkpoint_utils
from fairseq.data import Dictionary
from fairseq.sequence_generator import SequenceGenerator
from fairseq.tasks.translation import TranslationTask

import relu_former.plugin  # noqa: F401  (registers the plugin)

# fairseq's namespace-to-config conversion initialises hydra the deprecated way
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:hydra.*")

FIXTURES = sorted((Path(__file__).parent / "fixtures").glob("old_*.pt"))


def _dictionary(symbols):
    d = Dictionary()
    for word in symbols[d.nspecial:]:
        d.add_symbol(word)
    assert d.symbols == symbols
    return d


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_old_checkpoint_loads_and_decodes_identically(path):
    state = checkpoint_utils.load_checkpoint_to_cpu(str(path))
    saved = state["test_inputs"]
    cfg = state["cfg"]
    src, tgt = _dictionary(saved["symbols"]), _dictionary(saved["symbols"])
    task = TranslationTask(cfg.task, src, tgt)
    model = task.build_model(cfg.model)
    model.load_state_dict(state["model"], strict=True, model_cfg=cfg.model)
    model.eval()
    with torch.no_grad():
        logits = model(saved["src_tokens"], saved["src_lengths"],
                       saved["prev_output_tokens"])[0]
        generator = SequenceGenerator([model], tgt, beam_size=2, max_len_b=6)
        hypos = generator.forward({"net_input": {"src_tokens": saved["src_tokens"],
                                                 "src_lengths": saved["src_lengths"]}})
    # softmax attention now runs through torch's fused SDPA and relu attention through the
    # compiled kernel, which sum in another order than when the fixtures were saved: equal to
    # float32 rounding, not bit for bit (the hypotheses below are identical)
    torch.testing.assert_close(logits, saved["logits"], rtol=1e-5, atol=1e-6)
    assert [h[0]["tokens"].tolist() for h in hypos] == [
        t.tolist() for t in saved["hypotheses"]]


def test_fixtures_use_the_old_flag_spellings():
    """The fixtures must keep exercising the old names (else the test above proves little)."""
    kernels = {torch.load(p, weights_only=False)["args"].attention_kernel for p in FIXTURES}
    assert kernels == {"fused", "reference"} and len(FIXTURES) == 3
