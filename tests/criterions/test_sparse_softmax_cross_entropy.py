"""The ``sparse_softmax_cross_entropy`` criterion: in process against fairseq's criterion, and
end to end with ``fairseq-train`` (ReLUFormer + regularisers, fine-tuning a cross-entropy
checkpoint then decoding with top-k, and the flag checks)."""

import re

import pytest
import torch
import torch.nn.functional as F
from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion
from fairseq.data import Dictionary
from fairseq.logging import metrics

from relu_former.criterions.sparse_softmax_cross_entropy import (
    SparseSoftmaxCrossEntropyConfig,
    SparseSoftmaxCrossEntropyCriterion,
)
from relu_former.errors import OptionError
from relu_former.relu_attention.attention import ActivationMultiheadAttention
from relu_former.relu_attention.statistics import AttentionStatisticsMixin
from relu_former.sparse_softmax.sparse_softmax import sparse_softmax_cross_entropy
from scripts.benchmarks.criterion_harness import DictionaryTask, LogitsModel

from helpers import FairseqRun


class ReluAttentionModel(AttentionStatisticsMixin, LogitsModel):
    """Logits computed through one ReLU self-attention, which records regulariser figures
    when the criterion asks the model for them."""

    def __init__(self, bsz, length, vocab):
        super().__init__(torch.zeros(1))
        torch.manual_seed(0)
        self.states = torch.nn.Parameter(torch.randn(length, bsz, 8))
        self.attention = ActivationMultiheadAttention(8, 2, self_attention=True,
                                                      activation="relu")
        self.out = torch.nn.Linear(8, vocab)

    def attention_modules(self):
        return [self.attention]

    def forward(self, **net_input):
        hidden, _ = self.attention(self.states, self.states, self.states)
        return self.out(hidden.transpose(0, 1)), {"attn": [None]}


def make_sample(target, ntokens=None):
    pad = Dictionary().pad()
    return {
        "net_input": {},
        "target": target,
        "ntokens": int(target.ne(pad).sum()) if ntokens is None else ntokens,
    }


def make_criterion(vocab=20, **overrides):
    cfg = SparseSoftmaxCrossEntropyConfig(sentence_avg=False, **overrides)
    return SparseSoftmaxCrossEntropyCriterion(DictionaryTask(vocab), cfg)


def batch(vocab=20, seed=0):
    torch.manual_seed(seed)
    logits = torch.randn(3, 5, vocab, dtype=torch.float64) * 2
    target = torch.randint(4, vocab, (3, 5))
    target[2, 3:] = Dictionary().pad()
    return logits, target


@pytest.mark.parametrize("rule", ["top_k", "vocabulary"])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_equals_label_smoothed_cross_entropy_when_k_is_the_vocabulary(eps, rule):
    logits, target = batch()
    ours = make_criterion(sparse_softmax_k=20, label_smoothing=eps, sparse_label_smoothing=rule)
    theirs = LabelSmoothedCrossEntropyCriterion(DictionaryTask(20), sentence_avg=False,
                                                label_smoothing=eps)
    model_a, model_b = LogitsModel(logits), LogitsModel(logits)
    loss_a, size_a, log_a = ours(model_a, make_sample(target))
    loss_b, size_b, log_b = theirs(model_b, make_sample(target))
    torch.testing.assert_close(loss_a, loss_b, rtol=0, atol=1e-12)
    torch.testing.assert_close(log_a["nll_loss"], log_b["nll_loss"], rtol=0, atol=1e-12)
    assert size_a == size_b == 13
    loss_a.backward()
    loss_b.backward()
    torch.testing.assert_close(model_a.logits.grad, model_b.logits.grad, rtol=0, atol=1e-12)


@pytest.mark.parametrize("rule", ["top_k", "vocabulary"])
def test_smoothing_rule_reaches_the_kernel(rule):
    logits, target = batch(seed=3)
    criterion = make_criterion(sparse_softmax_k=4, label_smoothing=0.2, sparse_label_smoothing=rule)
    loss, _, _ = criterion(LogitsModel(logits), make_sample(target))
    want = sparse_softmax_cross_entropy(logits, target, 4, 0.2, ignore_index=1, smoothing=rule)
    torch.testing.assert_close(loss, want.loss.sum(), rtol=0, atol=0)
    other = "vocabulary" if rule == "top_k" else "top_k"
    different = sparse_softmax_cross_entropy(logits, target, 4, 0.2, ignore_index=1,
                                             smoothing=other)
    assert abs(float((loss - different.loss.sum()).detach())) > 1e-3


def test_sparse_loss_full_nll_and_outside_share_are_logged():
    logits, target = batch(seed=1)
    criterion = make_criterion(sparse_softmax_k=3, label_smoothing=0.1, report_accuracy=True)
    loss, sample_size, log = criterion(LogitsModel(logits), make_sample(target))
    kernel = sparse_softmax_cross_entropy(logits, target, 3, 0.1, ignore_index=1)
    torch.testing.assert_close(loss, kernel.loss.sum(), rtol=0, atol=0)
    real = target.ne(1)
    full_nll = F.cross_entropy(logits.transpose(1, 2), target, ignore_index=1, reduction="sum")
    torch.testing.assert_close(log["nll_loss"], full_nll, rtol=0, atol=1e-12)
    torch.testing.assert_close(log["sparse_nll_loss"], kernel.nll_loss.sum(), rtol=0, atol=0)
    outside = sum(
        int(target[b, i]) not in logits[b, i].topk(3).indices.tolist()
        for b in range(3) for i in range(5) if real[b, i]
    )
    assert 0 < outside < 13
    assert log["topk_outside"] == outside and log["topk_targets"] == 13
    assert log["n_correct"] == int((logits.argmax(-1).eq(target) & real).sum())
    assert sample_size == 13

    with metrics.aggregate(new_root=True) as agg:
        criterion.reduce_metrics([log, log])
    values = agg.get_smoothed_values()
    ln2 = torch.log(torch.tensor(2.0)).item()
    assert values["loss"] == pytest.approx(float(loss.detach()) / 13 / ln2, abs=1e-3)
    assert values["nll_loss"] == pytest.approx(float(full_nll) / 13 / ln2, abs=1e-3)
    assert values["ppl"] == pytest.approx(2 ** values["nll_loss"], rel=1e-2)
    assert values["outside_topk"] == pytest.approx(100 * outside / 13, abs=0.01)
    assert "sparse_nll_loss" in values and "accuracy" in values


def test_sentence_avg_uses_sentences_as_sample_size():
    logits, target = batch(seed=2)
    cfg = SparseSoftmaxCrossEntropyConfig(sentence_avg=True, sparse_softmax_k=4)
    criterion = SparseSoftmaxCrossEntropyCriterion(DictionaryTask(20), cfg)
    _, sample_size, log = criterion(LogitsModel(logits), make_sample(target))
    assert sample_size == 3 and log["sample_size"] == 3


def test_attention_regularisers_are_added_with_their_weights():
    target = torch.randint(4, 20, (2, 6))
    model = ReluAttentionModel(2, 6, 20).train()
    plain = make_criterion(sparse_softmax_k=5, attention_norm_loss_weight=0.3,
                           attention_entropy_loss_weight=0.2)  # not asked: weights unused
    weighted = make_criterion(sparse_softmax_k=5, attention_regularizers=True,
                              attention_norm_loss_weight=0.3,
                              attention_entropy_loss_weight=0.2)
    loss0, _, log0 = plain(model, make_sample(target))
    assert "attn_rows" not in log0
    loss1, _, log1 = weighted(model, make_sample(target))
    assert log1["attn_rows"] > 0 and log1["attn_norm_loss"] > 0
    extra = 0.3 * log1["attn_norm_loss"] + 0.2 * log1["attn_entropy_loss"]
    torch.testing.assert_close(loss1, loss0 + extra, rtol=1e-6, atol=1e-6)
    with metrics.aggregate(new_root=True) as agg:
        weighted.reduce_metrics([log1])
    assert "attn_norm_loss" in agg.get_smoothed_values()


@pytest.mark.parametrize("k,message", [
    (0, r"--sparse-softmax-k must be an integer >= 1"),
    (-3, r"--sparse-softmax-k must be an integer >= 1"),
    (21, r"--sparse-softmax-k 21 is larger than the target vocabulary \(20\)"),
])
def test_bad_sparse_k_names_the_flag(k, message):
    with pytest.raises(OptionError, match=message) as error:
        make_criterion(vocab=20, sparse_softmax_k=k)
    assert error.value.flag == "--sparse-softmax-k"


@pytest.mark.parametrize("eps", [1.0, 1.5, -0.1])
def test_bad_label_smoothing_names_the_flag(eps):
    with pytest.raises(OptionError, match=r"--label-smoothing must be in \[0, 1\)") as error:
        make_criterion(sparse_softmax_k=3, label_smoothing=eps)
    assert error.value.flag == "--label-smoothing"


@pytest.mark.slow
def test_fairseq_train_relu_former_with_sparse_softmax_and_regularisers(fairseq_run: FairseqRun):
    proc = fairseq_run.train(
        "--criterion", "sparse_softmax_cross_entropy", "--sparse-softmax-k", "5",
        "--label-smoothing", "0.1", "--attention-activation", "relu",
        "--attention-regularizers",
        arch="relu_former_iwslt_de_en",
    )
    log = proc.stdout + proc.stderr
    final = re.findall(r"\| train \| epoch .*", log)[-1]
    for key in ("loss", "nll_loss", "ppl", "sparse_nll_loss", "outside_topk",
                "attn_norm_loss", "attn_entropy_loss"):
        assert f"| {key} " in final, (key, final)
    valid = re.findall(r"\| valid \| epoch .*", log)[-1]
    assert "| outside_topk " in valid and "| nll_loss " in valid


@pytest.mark.slow
@pytest.mark.parametrize("flags,message", [
    # argparse takes "-3"
    (("--sparse-softmax-k", "-3"), "--sparse-softmax-k must be an integer >= 1"),
    (("--sparse-softmax-k", "100000"),
     "--sparse-softmax-k 100000 is larger than the target vocabulary"),
    (("--label-smoothing", "-0.1"), "--label-smoothing must be in [0, 1)"),
])
def test_fairseq_train_refuses_bad_flags_in_one_line(fairseq_run: FairseqRun, flags, message):
    proc = fairseq_run.train("--criterion", "sparse_softmax_cross_entropy", *flags,
                             check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"fairseq-train: error: {message}"), last
    assert not (fairseq_run.work / "checkpoints" / "checkpoint_last.pt").exists()


def checkpoint_state(path) -> dict:
    from fairseq import checkpoint_utils

    import relu_former.plugin  # noqa: F401  (the checkpoint allowlist for a safe load)

    return checkpoint_utils.load_checkpoint_to_cpu(str(path))


def first_train_loss(proc) -> float:
    """The loss fairseq logs at update 1 (the batch before any step of this run)."""
    lines = re.findall(r"\| train_inner \| .*", proc.stdout + proc.stderr)
    first = next(line for line in lines if re.search(r"\bnum_updates=1,", line))
    return float(re.search(r"\bloss=([\d.]+)", first).group(1))


@pytest.mark.slow
def test_finetune_cross_entropy_checkpoint_with_sparse_softmax_then_top_k_decoding(
        fairseq_run: FairseqRun):
    run = fairseq_run
    run.train("--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
              "--max-update", "12", "--validate-interval-updates", "12",
              "--save-interval-updates", "12", save_dir="pretrained")
    pretrained = run.work / "pretrained" / "checkpoint_last.pt"
    sparse = ("--criterion", "sparse_softmax_cross_entropy", "--sparse-softmax-k", "5",
              "--label-smoothing", "0.1")
    finetuned = run.train(*sparse, "--finetune-from-model", str(pretrained),
                          save_dir="finetuned")
    log = finetuned.stdout + finetuned.stderr
    assert f"loading pretrained model from {pretrained}" in log
    scratch = run.train(*sparse, save_dir="scratch")
    # same seed, same first batch: the continued model starts from the trained weights
    assert first_train_loss(finetuned) < first_train_loss(scratch) - 0.5
    state = checkpoint_state(run.work / "finetuned" / "checkpoint_last.pt")
    assert state["optimizer_history"][-1]["criterion_name"] == (
        "SparseSoftmaxCrossEntropyCriterion")
    assert state["optimizer_history"][-1]["num_updates"] == 6  # counted from 0 again
    run.generate("--task", "translation_sparse_decoding", "--sparse-softmax-k", "5",
                 "--beam", "5", save_dir="finetuned")

