"""Statistics only on request: a plain training step computes none, in any backend.

The counters wrap the functions every statistic passes through: the backends' sums
(``need_sums=True``), ``statistics_from_sums`` (ReLU/ReLA rows) and ``_normalized_statistics``
(softmax-like rows); softmax without a request must go through torch's fused SDPA.
"""

import pytest
import torch
import torch.nn.functional as F
from fairseq import options, tasks
from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

import relu_former.plugin  # noqa: F401  (registers the plugin)
from relu_former.criterions.regularized import RegularizedLabelSmoothedCrossEntropyCriterion
from relu_former.relu_attention import activations
from relu_former.relu_attention.kernels import dispatch

from helpers import TINY_MODEL_ARGS, USER_DIR


def build(data, criterion, *flags):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        str(data), "--user-dir", USER_DIR, "--arch", "relu_former_iwslt_de_en", "--cpu",
        *TINY_MODEL_ARGS, "--dropout", "0", "--criterion", criterion,
        "--label-smoothing", "0.1", *flags])
    task = tasks.setup_task(args)
    return task, task.build_model(args).train(), task.build_criterion(args)


def sample(task, bsz=3, src_len=9, tgt_len=7):
    generator = torch.Generator().manual_seed(0)
    vocab = task.source_dictionary
    tokens = torch.randint(vocab.nspecial, len(vocab), (bsz, src_len), generator=generator)
    target = torch.randint(vocab.nspecial, len(vocab), (bsz, tgt_len), generator=generator)
    return {"net_input": {"src_tokens": tokens, "src_lengths": torch.full((bsz,), src_len),
                          "prev_output_tokens": target},
            "target": target, "ntokens": target.numel(), "nsentences": bsz}


@pytest.fixture
def counters(monkeypatch):
    calls = {"sums": 0, "relu_rows": 0, "normalized_rows": 0, "sdpa": 0}

    def counted(name, function, only_if=None):
        def wrapper(*args, **kwargs):
            if only_if is None or only_if(kwargs):
                calls[name] += 1
            return function(*args, **kwargs)
        return wrapper

    for backend, function in list(dispatch.BACKENDS.items()):
        monkeypatch.setitem(dispatch.BACKENDS, backend,
                            counted("sums", function, lambda kw: kw.get("need_sums", True)))
    monkeypatch.setattr(activations, "statistics_from_sums",
                        counted("relu_rows", activations.statistics_from_sums))
    monkeypatch.setattr(activations, "_normalized_statistics",
                        counted("normalized_rows", activations._normalized_statistics))
    monkeypatch.setattr(F, "scaled_dot_product_attention",
                        counted("sdpa", F.scaled_dot_product_attention))
    return calls


@pytest.mark.parametrize("backend", ["auto", "tiled", "reference"])
def test_plain_cross_entropy_step_computes_no_statistic(backend, counters, toy_data_bin):
    task, model, criterion = build(toy_data_bin, "label_smoothed_cross_entropy",
                                   "--encoder-attention-activation", "softmax",
                                   "--cross-attention-activation", "softmax",
                                   "--attention-backend", backend)
    assert type(criterion) is LabelSmoothedCrossEntropyCriterion
    loss, _, _ = criterion(model, sample(task))
    loss.backward()
    assert counters["sums"] == counters["relu_rows"] == counters["normalized_rows"] == 0
    assert counters["sdpa"] == 2  # the softmax encoder and cross attentions, fused


def test_regularised_step_asks_every_module_once(counters, toy_data_bin):
    task, model, criterion = build(toy_data_bin, "regularized_label_smoothed_cross_entropy",
                                   "--encoder-attention-activation", "softmax",
                                   "--cross-attention-activation", "softmax")
    assert isinstance(criterion, RegularizedLabelSmoothedCrossEntropyCriterion)
    loss, _, log = criterion(model, sample(task))
    loss.backward()
    # decoder self-attention is relu; encoder and cross attention softmax (logged only)
    # (statistics_from_sums forms the rows of all three)
    assert counters["sums"] == 1 and counters["relu_rows"] == 3
    assert counters["normalized_rows"] == 2 and counters["sdpa"] == 0
    assert log["attn_reg_rows"] > 0 and log["attn_rows"] > log["attn_reg_rows"]
    assert model.attention_statistics() == []  # cleared once the criterion is done
