"""The cpp backend (compiled C++ tiles) against the float64 dense reference of test_tiled."""

import math
import os

import pytest
import torch

from relu_former.relu_attention.activations import relu_attention
from relu_former.relu_attention.kernels.compiled_cpu import (
    compiled_available,
    compiled_problem,
    compiled_relu_sums,
)
from tests.relu_attention.kernels.test_tiled import (
    CASES,
    GRADCHECK_CASES,
    B,
    H,
    assert_equals_reference,
    causal,
    gradcheck_sums,
    left_pad,
    make,
    reference,
)

# Skipped where the kernel is not loaded, except where RELU_FORMER_REQUIRE_COMPILED=1 (CI,
# make test): there every test runs, and fails naming the cause.
pytestmark = pytest.mark.skipif(
    not compiled_available(torch.zeros(1))
    and os.environ.get("RELU_FORMER_REQUIRE_COMPILED") != "1",
    reason=f"the compiled kernel is {compiled_problem()} (docs/install.md)")


@pytest.fixture
def one_thread_here() -> None:
    """torch's thread count as the test process has it: the kernel splits its tiles between
    threads (at::parallel_for), and the values checked here must not depend on how. The
    gradchecks, thousands of calls on tiny inputs, ask for one thread themselves."""


def long_case():
    """More queries than a 128-query tile and keys than a 512-key tile, so every pass crosses
    tile borders; a random 4-d mask with rows that see no key, a right-padded batch row."""
    tgt_len, src_len = 140, 530
    blocked = torch.rand(B, H, tgt_len, src_len, generator=torch.Generator().manual_seed(1)) < 0.5
    blocked[:, :, 3] = True
    pad = torch.zeros(B, src_len, dtype=torch.bool)
    pad[0, 520:] = True
    return tgt_len, src_len, pad, blocked


ALL_CASES = {**CASES, "long_4d_mask": long_case(),
             "long_causal_1x1_mask": (600, 600, left_pad(600), causal(600))}


def run(q, k, v, pad, blocked, gamma=1.0):
    result = relu_attention(q, k, v, key_padding_mask=pad, attn_mask=blocked, gamma=gamma,
                            need_statistics=True, backend="cpp")
    stats = result.statistics
    return result.out, stats.row_sum, stats.entropy, stats.zeros, stats.n


@pytest.mark.parametrize("name", list(ALL_CASES))
def test_values_and_gradients_equal_the_float64_reference(name):
    assert_equals_reference(run, ALL_CASES[name], 1e-10)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("name", GRADCHECK_CASES)
def test_gradcheck_float64(name):
    gradcheck_sums(compiled_relu_sums, name)


@pytest.mark.usefixtures("one_thread")
def test_gradcheck_with_dropout_replays_the_masks():
    # two heads of width 3, as gradcheck_sums cuts them: gradcheck's cost grows with the
    # inputs' and outputs' elements
    leaves = tuple(x[:, :2, :, :3].clone().requires_grad_() for x in make(6, 7))

    def function(q, k, v):
        sums = compiled_relu_sums(q, k, v, attn_mask=causal(6, 7), dropout_p=0.4, seed=3)
        return sums.u, sums.row_sum, sums.xlogx

    assert torch.autograd.gradcheck(function, leaves)


def test_dropout_drops_the_given_share_and_keeps_the_expectation():
    """Every score 1 and every value 1: U_i counts the kept keys, each kept one 1/(1-p)."""
    p, n = 0.3, 4000
    q = torch.ones(1, 1, 8, 4) * 2.0  # q . k / sqrt(4) = 1 for every key
    k = torch.ones(1, 1, n, 4) / 4.0
    v = torch.ones(1, 1, n, 1)
    plain = compiled_relu_sums(q, k, v, need_sums=True)
    dropped = compiled_relu_sums(q, k, v, dropout_p=p, seed=11, need_sums=True)
    torch.testing.assert_close(dropped.row_sum, plain.row_sum)  # statistics are undropped
    kept = dropped.u[..., 0] * (1 - p)  # the kept keys of each row
    # each row keeps Binomial(n, 1 - p) keys: within 5 standard deviations
    sd = math.sqrt(n * p * (1 - p))
    assert ((kept - n * (1 - p)).abs() < 5 * sd).all(), kept
    assert not torch.equal(kept[..., 0], kept[..., 1])  # rows draw their own masks
    again = compiled_relu_sums(q, k, v, dropout_p=p, seed=11)
    assert torch.equal(again.u, dropped.u)  # the seed replays the masks


def test_float32_and_bfloat16_against_float64():
    tgt_len, src_len, pad, blocked = ALL_CASES["long_4d_mask"]
    for dtype, tolerance in ((torch.float32, 1e-5), (torch.bfloat16, 5e-2)):
        q, k, v = make(tgt_len, src_len, dtype=dtype)
        got = run(q, k, v, pad, blocked)
        assert got[0].dtype == dtype
        for a, b in zip(got, reference(q, k, v, pad, blocked)):
            torch.testing.assert_close(a.double(), b, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("name", ["no_mask", "self_left_pad_causal", "cross_right_pad",
                                  "empty_rows_4d_mask", "long_4d_mask"])
def test_the_variance_factor_inside_the_tiles_equals_the_reference(name):
    """Without statistics the factor 1/(gamma sqrt(n_i/2)) rides on the scores (a number when
    no mask makes rows differ, else one per row): output and gradients as the reference."""
    tgt_len, src_len, pad, blocked = ALL_CASES[name]
    leaves = [x.requires_grad_() for x in make(tgt_len, src_len)]
    out = relu_attention(*leaves, key_padding_mask=pad, attn_mask=blocked, gamma=1.3,
                         backend="cpp").out
    want = reference(*leaves, pad, blocked, gamma=1.3)[0]
    torch.testing.assert_close(out, want, atol=1e-10, rtol=1e-10)
    weight = torch.randn(want.shape, dtype=torch.float64)
    got_grads = torch.autograd.grad((out * weight).sum(), leaves)
    for a, b in zip(got_grads, torch.autograd.grad((want * weight).sum(), leaves)):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)


@pytest.mark.usefixtures("one_thread")
def test_gradcheck_with_a_row_scale_and_dropout():
    leaves = tuple(x[:, :2, :, :3].clone().requires_grad_() for x in make(6, 7))  # as above
    rows = torch.rand(B, 2, 6, dtype=torch.float64) + 0.5

    def function(q, k, v):
        return compiled_relu_sums(q, k, v, attn_mask=causal(6, 7), dropout_p=0.3, seed=5,
                                  need_sums=False, row_scale=rows).u

    assert torch.autograd.gradcheck(function, leaves)
    with pytest.raises(ValueError, match="ask for one of the two"):
        compiled_relu_sums(*leaves, row_scale=rows)  # with the statistics


def test_heads_are_read_and_written_where_fairseq_lays_them():
    """q, k, v as fairseq's projections give them ((T, B, H, D) memory, seen as (B, H, T, D))
    are read without a copy; U comes back in that layout, so merging the heads is a view, and
    the gradients in the inputs' layout; the values are those of contiguous inputs."""
    tgt_len, src_len, pad, blocked = ALL_CASES["long_4d_mask"]
    strided = [x.permute(2, 0, 1, 3).contiguous().permute(1, 2, 0, 3).requires_grad_()
               for x in make(tgt_len, src_len)]
    dense = [x.detach().contiguous().requires_grad_() for x in strided]
    assert not strided[0].is_contiguous()
    got = compiled_relu_sums(*strided, key_padding_mask=pad, attn_mask=blocked, need_sums=False)
    want = compiled_relu_sums(*dense, key_padding_mask=pad, attn_mask=blocked, need_sums=False)
    torch.testing.assert_close(got.u, want.u, atol=1e-12, rtol=1e-12)
    assert got.u.permute(2, 0, 1, 3).is_contiguous()  # (T, B, H, D) in memory
    weight = torch.randn(want.u.shape, dtype=torch.float64)
    for a, b, x in zip(torch.autograd.grad((got.u * weight).sum(), strided),
                       torch.autograd.grad((want.u * weight).sum(), dense), strided):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)
        assert a.stride() == x.stride()
