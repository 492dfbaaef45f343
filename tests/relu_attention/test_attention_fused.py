"""The attention module with the fused kernel (default) against the reference paths, and the
memory bound of a whole model in training (no Tq x Tk tensor anywhere)."""

import pytest
import torch
from fairseq import options, tasks
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import relu_former.plugin  # noqa: F401  (registers the plugin)
from relu_former.relu_attention.attention import ActivationMultiheadAttention
from relu_former.relu_attention.kernels.tiled import tile_shape

from helpers import TINY_MODEL_ARGS, USER_DIR

E, HEADS = 16, 2


def make(activation="relu", fused=True, key_chunk_size=0, **kwargs):
    """The tiled backend (``fused``) or the reference one, dense or over key blocks."""
    torch.manual_seed(0)
    backend = "tiled" if fused else "reference"
    return ActivationMultiheadAttention(E, HEADS, self_attention=True, activation=activation,
                                        attention_backend=backend,
                                        attention_key_chunk_size=0 if fused else key_chunk_size,
                                        **kwargs)


def future_mask(length):
    return torch.triu(torch.full((length, length), float("-inf")), 1)


@pytest.mark.parametrize("activation", ["relu", "rela"])
@pytest.mark.parametrize("reference_chunk", [0, 3])
def test_fused_equals_reference_values_gradients_statistics(activation, reference_chunk):
    x = torch.randn(9, 3, E, dtype=torch.float64)
    padding = torch.zeros(3, 9, dtype=torch.bool)
    padding[1, :2] = True
    results = []
    for fused in (True, False):
        module = make(activation, fused, key_chunk_size=reference_chunk).double().train()
        module.need_statistics = True
        leaf = x.clone().requires_grad_()
        out, weights = module(leaf, leaf, leaf, key_padding_mask=padding,
                              attn_mask=future_mask(9).double())
        stats = module.attention_statistics()
        loss = out.pow(2).sum()
        if activation == "relu":  # the regularisers' statistics carry gradients
            loss = loss + (stats.row_sum * stats.valid).sum() + (stats.entropy * stats.valid).sum()
        loss.backward()
        grads = [leaf.grad] + [p.grad for p in module.parameters()]
        results.append((out, stats.row_sum, stats.entropy, stats.zeros, *grads))
        assert weights is None  # training: weights only on request
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)


def test_incremental_decoding_with_the_fused_kernel_equals_the_full_pass():
    module = make("relu").eval()
    x = torch.randn(7, 3, E)
    with torch.no_grad():  # as in fairseq-generate: the fused kernel, weights recomputed
        full, full_weights = module(x, x, x, attn_mask=future_mask(7), need_weights=True)
        state = {}
        for t in range(7):
            step = x[t:t + 1]
            out, weights = module(step, step, step, incremental_state=state, need_weights=True)
            torch.testing.assert_close(out, full[t:t + 1], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(weights[:, 0], full_weights[:, t, :t + 1], rtol=1e-5,
                                       atol=1e-6)


def test_weights_in_training_only_on_request():
    module = make("relu").train()
    x = torch.randn(5, 2, E)
    # fairseq's decoder asks its alignment layer with both flags at every training step
    assert module(x, x, x, need_weights=True, need_head_weights=True)[1] is None
    module.training_weights = True
    head_weights = module(x, x, x, need_head_weights=True)[1]
    assert head_weights.shape == (HEADS, 2, 5, 5)
    weights = module(x, x, x, need_weights=True)[1]
    assert weights.shape == (2, 5, 5) and weights.requires_grad  # e.g. for an alignment loss
    torch.testing.assert_close(weights, head_weights.mean(0))
    module.training_weights = False
    assert module.eval()(x, x, x, need_weights=True)[1].shape == (2, 5, 5)  # evaluation


class ScoreMatrixWatch(TorchDispatchMode):
    """Records the shapes of tensors that hold (Tq, Tk) matrices for given lengths, one per
    sequence or head (the 2-d causal mask, shared by all, is fairseq's and O(n^2) once)."""

    def __init__(self, lengths):
        super().__init__()
        self.lengths = set(lengths)
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for item in tree_flatten(out)[0]:
            if (isinstance(item, torch.Tensor) and item.dim() >= 3
                    and item.numel() > item.shape[-1] * item.shape[-2]
                    and item.shape[-1] in self.lengths and item.shape[-2] in self.lengths):
                self.seen.append((str(func), tuple(item.shape)))
        return out


@pytest.mark.parametrize("kernel, bounded", [("tiled", True), ("reference", False)])
def test_a_training_step_of_the_model_holds_no_score_matrix(kernel, bounded, toy_data_bin):
    """Encoder, decoder and cross attention (fairseq asks the last decoder layer for its
    weights) of a relu_former model, forward and backward, with lengths past one tile."""
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        str(toy_data_bin), "--user-dir", USER_DIR, "--arch", "relu_former_iwslt_de_en",
        "--cpu", *TINY_MODEL_ARGS, "--attention-backend", kernel, "--attention-activation", "relu",
        "--max-source-positions", "1024", "--max-target-positions", "1024"])
    task = tasks.setup_task(args)
    model = task.build_model(args).train()
    src_len, tgt_len, batch = 301, 283, 2
    assert tile_shape(batch * 2, tgt_len, src_len) != (tgt_len, src_len)
    vocab = task.source_dictionary
    src = torch.randint(vocab.nspecial, len(vocab), (batch, src_len))
    prev = torch.randint(vocab.nspecial, len(vocab), (batch, tgt_len))
    with ScoreMatrixWatch({src_len, tgt_len}) as watch:
        logits, extra = model(src, torch.full((batch,), src_len), prev)
        logits.float().pow(2).mean().backward()
    assert extra["attn"] == [None]
    assert (watch.seen == []) == bounded, watch.seen[:3]
