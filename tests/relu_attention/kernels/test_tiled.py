"""The tiled backend against a float64 dense reference written from the formulas."""

import functools
import math
import os

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from relu_former.relu_attention.activations import relu_attention
from relu_former.relu_attention.kernels.common import count_visible_keys
from relu_former.relu_attention.kernels.compiled_cpu import compiled_available
from relu_former.relu_attention.kernels.tiled import tile_shape
from relu_former.relu_attention.kernels.tiled import tiled_relu_sums as fused_relu_sums

B, H, D = 2, 3, 5
# tiles of a few keys and queries, so that every case crosses tile borders and skips tiles
SMALL_TILES = dict(tile_elements=B * H * 4 * 3, key_block=3)


def reference(q, k, v, pad=None, blocked=None, gamma=1.0):
    """float64: out_i = sum_j s_ij v_j / (gamma sqrt(n_i/2)), S_i, H_i, zeros, with s the
    ReLU scores over the visible keys (others 0)."""
    q, k, v = q.double(), k.double(), v.double()
    visible = torch.ones(q.size(0), 1, q.size(2), k.size(2), dtype=torch.bool)
    if pad is not None:
        visible = visible & ~pad[:, None, None, :]
    if blocked is not None:
        visible = visible & ~(blocked if blocked.dim() == 4 else blocked[None, None])
    s = torch.relu(q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))) * visible
    n = visible.sum(-1).double().expand(s.shape[:-1])
    out = (s @ v) / (gamma * torch.sqrt(n.clamp(min=1) / 2)).unsqueeze(-1)
    row_sum = s.sum(-1)
    p = s / torch.where(row_sum > 0, row_sum, 1.0).unsqueeze(-1)
    entropy = -(torch.where(p > 0, p * torch.log(torch.where(p > 0, p, 1.0)), 0.0)).sum(-1)
    zeros = n - (s > 0).sum(-1)
    return out, row_sum, entropy, zeros, n


def causal(tgt_len, src_len=None):
    src_len = src_len or tgt_len
    return torch.triu(torch.ones(tgt_len, src_len, dtype=torch.bool), 1 + src_len - tgt_len)


def make(tgt_len, src_len, dtype=torch.float64, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, t, D, generator=generator, dtype=dtype)
                 for t in (tgt_len, src_len, src_len))


def right_pad(src_len):
    pad = torch.zeros(B, src_len, dtype=torch.bool)
    pad[0, -4:] = True
    return pad


def left_pad(src_len):
    pad = torch.zeros(B, src_len, dtype=torch.bool)
    pad[1, :3] = True
    return pad


def all_blocked_rows(tgt_len, src_len):
    """A 4-d mask where some rows see no key and some see exactly one (n_i = 1)."""
    mask = torch.rand(B, H, tgt_len, src_len, generator=torch.Generator().manual_seed(5)) < 0.3
    mask[:, :, 0] = True  # no key at all
    mask[0, 1, 2] = True
    mask[0, 1, 2, 4] = False  # exactly one key
    return mask


# name: (tgt_len, src_len, key padding, attention mask)
CASES = {
    "self_right_pad": (9, 9, right_pad(9), None),
    "self_left_pad_causal": (10, 10, left_pad(10), causal(10)),
    "cross_right_pad": (6, 11, right_pad(11), None),
    "cross_left_pad": (4, 8, left_pad(8), None),
    "single_key": (5, 1, None, None),
    "empty_rows_4d_mask": (7, 9, left_pad(9), all_blocked_rows(7, 9)),
    "no_mask": (8, 13, None, None),
}


def run_fused(q, k, v, pad, blocked, gamma=1.0, **tiles):
    """out, S, H, zeros and n from the fused kernel (through ``relu_attention`` with the
    default tiles; small tiles go through ``fused_relu_sums``, which takes them)."""
    if not tiles:
        result = relu_attention(q, k, v, key_padding_mask=pad, attn_mask=blocked, gamma=gamma,
                                need_statistics=True, backend="tiled")
        stats = result.statistics
        return result.out, stats.row_sum, stats.entropy, stats.zeros, stats.n
    sums = fused_relu_sums(q, k, v, key_padding_mask=pad, attn_mask=blocked, **tiles)
    n = count_visible_keys(pad, blocked, q.size(2), k.size(2)).double()
    n = n.expand(q.shape[:-1])
    out = sums.u / (gamma * torch.sqrt(n.clamp(min=1) / 2)).unsqueeze(-1)
    safe = torch.where(sums.row_sum > 0, sums.row_sum, torch.ones_like(sums.row_sum))
    entropy = torch.where(sums.row_sum > 0, torch.log(safe) - sums.xlogx / safe, 0.0)
    return out, sums.row_sum, entropy, n - sums.positives, n


def assert_equals_reference(run, case, tolerance):
    """out, S, H, zeros, n of ``run(q, k, v, pad, blocked, gamma)`` and the gradients of q, k,
    v through out, S and H equal the float64 reference's on ``case``."""
    tgt_len, src_len, pad, blocked = case
    leaves = [x.requires_grad_() for x in make(tgt_len, src_len)]
    got = run(*leaves, pad, blocked, gamma=1.3)
    want = reference(*leaves, pad, blocked, gamma=1.3)
    for a, b in zip(got, want):
        torch.testing.assert_close(a.double(), b, atol=tolerance, rtol=tolerance)
    weights = [torch.randn(x.shape, dtype=torch.float64) for x in want[:3]]

    def loss(values):
        return sum((x * w).sum() for x, w in zip(values[:3], weights))

    got_grads = torch.autograd.grad(loss(got), leaves)
    want_grads = torch.autograd.grad(loss(want), leaves)
    for a, b in zip(got_grads, want_grads):
        torch.testing.assert_close(a, b, atol=tolerance, rtol=tolerance)


def gradcheck_sums(sums, name):
    """gradcheck of U, S, T from ``sums(q, k, v, key_padding_mask, attn_mask)`` on a case."""
    tgt_len, src_len, pad, blocked = CASES[name]
    leaves = tuple(x[:, :2, :, :3].clone().requires_grad_() for x in make(tgt_len, src_len))
    if blocked is not None and blocked.dim() == 4:
        blocked = blocked[:, :2]

    def function(q, k, v):
        result = sums(q, k, v, key_padding_mask=pad, attn_mask=blocked)
        return result.u, result.row_sum, result.xlogx

    assert torch.autograd.gradcheck(function, leaves)


GRADCHECK_CASES = ["self_left_pad_causal", "cross_right_pad", "single_key", "empty_rows_4d_mask"]
# small tiles for gradcheck_sums's inputs (2 heads of width 3): one sequence per tile, 3 keys
GRADCHECK_TILES = dict(tile_elements=2 * 2 * 3 * 3, key_block=3)


@pytest.mark.parametrize("tiles", [{}, SMALL_TILES], ids=["default_tiles", "small_tiles"])
@pytest.mark.parametrize("name", list(CASES))
def test_values_and_gradients_equal_the_float64_reference(name, tiles):
    assert_equals_reference(functools.partial(run_fused, **tiles), CASES[name], 1e-5)


@pytest.mark.parametrize("name", GRADCHECK_CASES)
def test_gradcheck_float64(name):
    gradcheck_sums(functools.partial(fused_relu_sums, **GRADCHECK_TILES), name)


def test_gradcheck_with_dropout_replays_the_masks():
    # two heads of width 3, as gradcheck_sums cuts them (gradcheck's cost grows with the
    # inputs' and outputs' elements), in tiles that still split the batch and the keys
    leaves = tuple(x[:, :2, :, :3].clone().requires_grad_() for x in make(6, 7))

    def function(q, k, v):
        torch.manual_seed(3)  # the same dropout masks at every call of gradcheck
        sums = fused_relu_sums(q, k, v, attn_mask=causal(6, 7), dropout_p=0.4,
                               **GRADCHECK_TILES)
        return sums.u, sums.row_sum, sums.xlogx

    assert torch.autograd.gradcheck(function, leaves)


def test_dropout_drops_values_only_and_keeps_the_expectation():
    q, k, v = make(4, 6)
    plain = fused_relu_sums(q, k, v)
    torch.manual_seed(0)
    dropped = fused_relu_sums(q, k, v, dropout_p=0.5)
    # the statistics are those of the undropped scores
    torch.testing.assert_close(dropped.row_sum, plain.row_sum)
    assert not torch.allclose(dropped.u, plain.u)
    samples = torch.stack([fused_relu_sums(q, k, v, dropout_p=0.5).u for _ in range(800)])
    standard_error = samples.std(0) / math.sqrt(len(samples))
    assert ((samples.mean(0) - plain.u).abs() <= 5 * standard_error + 1e-9).all()


@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 5e-2)])
def test_low_precision_against_float64(dtype, tolerance):
    tgt_len, src_len, pad, blocked = CASES["self_left_pad_causal"]
    q, k, v = make(tgt_len, src_len, dtype=dtype)
    got = run_fused(q, k, v, pad, blocked)
    want = reference(q, k, v, pad, blocked)
    assert got[0].dtype == dtype
    assert got[1].dtype == torch.float32
    for a, b in zip(got, want):
        torch.testing.assert_close(a.double(), b, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("statistics", [True, False])
@pytest.mark.parametrize("backend", ["tiled", "cpp"])
def test_incremental_decoding_equals_the_full_pass(backend, statistics):
    """Decoder self-attention step by step (one query, keys so far) = the causal full pass
    (without statistics the compiled kernel applies the factor inside its tiles)."""
    if (backend == "cpp" and not compiled_available(torch.zeros(1))
            and os.environ.get("RELU_FORMER_REQUIRE_COMPILED") != "1"):
        pytest.skip("the compiled kernel is not loaded (docs/install.md)")
    steps = 9
    q, k, v = make(steps, steps)
    pad = left_pad(steps)
    full = relu_attention(q, k, v, key_padding_mask=pad, attn_mask=causal(steps),
                          need_statistics=statistics, backend=backend)
    for t in range(steps):
        step = relu_attention(q[:, :, t:t + 1], k[:, :, :t + 1], v[:, :, :t + 1],
                              key_padding_mask=pad[:, :t + 1], need_statistics=statistics,
                              backend=backend)
        torch.testing.assert_close(step.out, full.out[:, :, t:t + 1], atol=1e-12, rtol=0)
        for name in ("row_sum", "entropy", "zeros", "n") if statistics else ():
            torch.testing.assert_close(getattr(step.statistics, name),
                                       getattr(full.statistics, name)[:, :, t:t + 1])


class LargestTensor(TorchDispatchMode):
    """Records the most elements of any tensor an operator returns."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for item in tree_flatten(out)[0]:
            if isinstance(item, torch.Tensor):
                self.largest = max(self.largest, item.numel())
        return out


def test_neither_pass_holds_a_score_matrix():
    n, heads = 512, 2
    q, k, v = (torch.randn(1, heads, n, 16, requires_grad=True) for _ in range(3))
    with LargestTensor() as mode:
        result = relu_attention(q, k, v, attn_mask=causal(n), need_statistics=True,
                                backend="tiled")
        loss = result.out.square().sum() + result.statistics.entropy.sum()
        loss.backward()
    bq, bk = tile_shape(heads, n, n)
    assert heads * bq * bk < heads * n * n  # the tiles are smaller than the matrix ...
    assert mode.largest == heads * bq * bk  # ... and are the largest tensors of both passes


def test_tile_shape_bounds_the_tile():
    assert tile_shape(8, 30, 40) == (30, 40)  # one tile
    bq, bk = tile_shape(4, 4096, 4096)
    assert 4 * bq * bk <= 2**18 and bk == 256
    bq, bk = tile_shape(4, 4096, 4096, tile_elements=10, key_block=512)
    assert bq >= 32  # the batch is split instead of shrinking the query block further
