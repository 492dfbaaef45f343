"""The reference backend (dense and key-chunked) against a float64, row-by-row reference.

The formulas are those of docs/design.md, "ReLU attention" and "Regularisers". Every call
here names ``backend="reference"``, so ``key_chunk_size`` really selects the chunked path
(the other backends reject a chunk size).
"""

import functools
import math
import sys

import pytest
import torch

from relu_former.relu_attention import activations
from relu_former.relu_attention.activations import (
    ACTIVATIONS,
    bind_attention,
    check_activation,
    normalized_attention,
)
from relu_former.relu_attention.kernels import dispatch
from relu_former.relu_attention.kernels import reference as reference_kernel

relu_attention = functools.partial(activations.relu_attention, backend="reference")
rela_attention = functools.partial(activations.rela_attention, backend="reference")
relu_sums = functools.partial(dispatch.relu_sums, backend="reference")

B, H, D = 2, 2, 4


def reference(q, k, v, padding=None, blocked=None, gamma=None, factor=True):
    """Loop over rows, straight from the formulas: out, weights, S, H, zeros, n."""
    batch, heads, tgt_len, dim = q.shape
    src_len = k.size(2)
    out = torch.zeros(batch, heads, tgt_len, v.size(-1), dtype=torch.float64)
    weights = torch.zeros(batch, heads, tgt_len, src_len, dtype=torch.float64)
    row_sum, entropy, zeros, count = (torch.zeros(batch, heads, tgt_len, dtype=torch.float64)
                                      for _ in range(4))
    for b in range(batch):
        for h in range(heads):
            g = 1.0 if gamma is None else float(gamma[h])
            for i in range(tgt_len):
                keys = [j for j in range(src_len)
                        if not (padding is not None and padding[b, j])
                        and not (blocked is not None and blocked[i, j])]
                n = len(keys)
                c = 1.0 / (g * math.sqrt(max(n, 1) / 2)) if factor else 1.0
                s = {j: max(0.0, float(q[b, h, i].double() @ k[b, h, j].double()) / math.sqrt(dim))
                     for j in keys}
                for j, value in s.items():
                    weights[b, h, i, j] = value * c
                    out[b, h, i] += value * c * v[b, h, j].double()
                total = sum(s.values())
                row_sum[b, h, i] = total
                if total > 0:
                    entropy[b, h, i] = -sum(x / total * math.log(x / total)
                                            for x in s.values() if x > 0)
                zeros[b, h, i] = sum(1 for x in s.values() if x == 0)
                count[b, h, i] = n
    return out, weights, row_sum, entropy, zeros, count


def causal(tgt_len, src_len=None):
    return torch.triu(torch.ones(tgt_len, src_len or tgt_len, dtype=torch.bool), 1)


def padding_mask(src_len, side):
    mask = torch.zeros(B, src_len, dtype=torch.bool)
    if side == "right":
        mask[0, -3:] = True
    elif side == "left":
        mask[1, :2] = True
    return mask


def inputs(tgt_len, src_len, dtype=torch.float64, seed=0):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, tgt_len, D, generator=generator, dtype=dtype)
    k = torch.randn(B, H, src_len, D, generator=generator, dtype=dtype)
    v = torch.randn(B, H, src_len, D, generator=generator, dtype=dtype)
    return q, k, v


CASES = {
    "right_pad_self": dict(tgt_len=7, src_len=7, pad="right", causal=False),
    "left_pad_causal": dict(tgt_len=7, src_len=7, pad="left", causal=True),
    "cross_right_pad": dict(tgt_len=5, src_len=9, pad="right", causal=False),
    "cross_left_pad": dict(tgt_len=3, src_len=6, pad="left", causal=False),
    "single_key": dict(tgt_len=4, src_len=1, pad=None, causal=False),
}


def case_tensors(name, dtype=torch.float64):
    case = CASES[name]
    q, k, v = inputs(case["tgt_len"], case["src_len"], dtype)
    pad = padding_mask(case["src_len"], case["pad"]) if case["pad"] else None
    blocked = causal(case["tgt_len"], case["src_len"]) if case["causal"] else None
    return q, k, v, pad, blocked


@pytest.mark.parametrize("chunk", [0, 1, 3])
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_float64_reference(name, chunk):
    q, k, v, pad, blocked = case_tensors(name)
    gamma = torch.tensor([0.5, 2.0], dtype=torch.float64)
    result = relu_attention(q, k, v, key_padding_mask=pad, attn_mask=blocked, gamma=gamma,
                            key_chunk_size=chunk, need_weights=True, need_statistics=True)
    out, weights, row_sum, entropy, zeros, count = reference(q, k, v, pad, blocked, gamma)
    stats = result.statistics
    torch.testing.assert_close(result.out, out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(result.weights, weights, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(stats.row_sum, row_sum, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(stats.entropy, entropy, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(stats.zeros.double(), zeros)
    torch.testing.assert_close(stats.n.double(), count)
    assert torch.equal(stats.valid, count > 0)
    # the weights are exactly the coefficients applied to the values
    torch.testing.assert_close(torch.matmul(result.weights, v), result.out)


def test_single_key_row_is_unit_variance_factor():
    """n_i = 1: out = ReLU(q.k/sqrt(d)) v / sqrt(1/2); the first causal row sees one key."""
    q, k, v = inputs(3, 3)
    result = relu_attention(q, k, v, attn_mask=causal(3), need_statistics=True)
    score = torch.relu((q[..., 0, :] * k[..., 0, :]).sum(-1) / math.sqrt(D))
    expected = score[..., None] * v[..., 0, :] / math.sqrt(0.5)
    torch.testing.assert_close(result.out[..., 0, :], expected)
    assert torch.all(result.statistics.n[..., 0] == 1)
    entropy = result.statistics.entropy[..., 0]  # log S - T/S with one key: 0 up to rounding
    torch.testing.assert_close(entropy, torch.zeros_like(entropy), rtol=0, atol=1e-12)


def all_zero_rows():
    """Row 0 of every head has only negative scores; row 2 sees no key at all."""
    q, k, v = inputs(4, 5)
    k = k.abs() + 0.1
    q[..., 0, :] = -(q[..., 0, :].abs() + 0.1)
    blocked = torch.zeros(4, 5, dtype=torch.bool)
    blocked[2] = True
    return q, k, v, blocked


@pytest.mark.parametrize("chunk", [0, 2])
def test_all_zero_rows_give_no_nan(chunk):
    q, k, v, blocked = all_zero_rows()
    q, k, v = (x.clone().requires_grad_() for x in (q, k, v))
    result = relu_attention(q, k, v, attn_mask=blocked, key_chunk_size=chunk,
                            need_weights=True, need_statistics=True)
    stats = result.statistics
    assert torch.all(result.out[..., 0, :] == 0) and torch.all(result.out[..., 2, :] == 0)
    assert torch.all(stats.row_sum[..., 0] == 0) and torch.all(stats.entropy[..., 0] == 0)
    assert torch.all(stats.zeros[..., 0] == 5) and torch.all(stats.n[..., 2] == 0)
    assert not stats.valid[..., 2].any() and stats.valid[..., 0].all()
    loss = result.out.sum() + stats.entropy.sum() + stats.row_sum.clamp(min=1e-6).log().sum()
    loss.backward()
    for tensor in (result.out, stats.entropy, q.grad, k.grad, v.grad):
        assert torch.isfinite(tensor).all()


def statistics_function(pad, blocked, chunk, padded_queries=None):
    """out, S, H and (dense path) the returned weights, as functions of q, k, v, gamma."""
    def run(q, k, v, gamma):
        result = relu_attention(q, k, v, key_padding_mask=pad, attn_mask=blocked, gamma=gamma,
                                key_chunk_size=chunk, need_statistics=True,
                                need_weights=chunk == 0, query_padding_mask=padded_queries)
        weights = (result.weights,) if chunk == 0 else ()
        return (result.out, result.statistics.row_sum, result.statistics.entropy) + weights
    return run


@pytest.mark.parametrize("chunk", [0, 2])
@pytest.mark.parametrize("name", ["left_pad_causal", "cross_right_pad", "single_key"])
def test_gradcheck_outputs_and_regulariser_statistics(name, chunk):
    q, k, v, pad, blocked = case_tensors(name)
    gamma = torch.tensor([0.7, 1.3], dtype=torch.float64, requires_grad=True)
    args = tuple(x.clone().requires_grad_() for x in (q, k, v)) + (gamma,)
    assert torch.autograd.gradcheck(statistics_function(pad, blocked, chunk), args)


@pytest.mark.parametrize("chunk", [0, 2])
def test_gradcheck_with_all_zero_rows(chunk):
    q, k, v, blocked = all_zero_rows()
    args = tuple(x.clone().requires_grad_() for x in (q, k, v)) + (1.0,)
    assert torch.autograd.gradcheck(statistics_function(None, blocked, chunk), args)


@pytest.mark.parametrize("chunk", [1, 3, 6, 16])
def test_chunked_equals_dense_values_and_gradients(chunk):
    """float32, causal + left padding, 1e-5 for outputs, statistics and every gradient."""
    q, k, v = inputs(11, 11, dtype=torch.float32, seed=3)
    pad = torch.zeros(B, 11, dtype=torch.bool)
    pad[1, :4] = True
    gamma = torch.tensor([0.8, 1.5], requires_grad=True)
    grads, values = [], []
    for size in (0, chunk):
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        result = relu_attention(*leaves, key_padding_mask=pad, attn_mask=causal(11),
                                gamma=gamma, key_chunk_size=size, need_statistics=True)
        stats = result.statistics
        loss = ((result.out ** 2).sum() + (stats.row_sum * 0.3).sum()
                + (stats.entropy * 0.7).sum())
        grads.append(torch.autograd.grad(loss, leaves + [gamma]))
        values.append((result.out, stats.row_sum, stats.entropy, stats.zeros))
    for dense, chunked in zip(values[0], values[1]):
        torch.testing.assert_close(chunked, dense, rtol=1e-5, atol=1e-5)
    for dense, chunked in zip(grads[0], grads[1]):
        torch.testing.assert_close(chunked, dense, rtol=1e-5, atol=1e-5)


def test_chunked_dropout_backward_replays_the_same_mask():
    """With dropout the chunked backward must use the forward's masks: gradcheck passes."""
    q, k, v = inputs(5, 6, seed=4)
    leaves = tuple(x.clone().requires_grad_() for x in (q, k, v))

    def run(q, k, v):
        torch.manual_seed(11)  # the same draw of block seeds at every evaluation
        return relu_sums(q, k, v, key_chunk_size=2, dropout_p=0.4).u

    assert torch.autograd.gradcheck(run, leaves)
    assert not torch.equal(run(*leaves), relu_sums(q, k, v, key_chunk_size=2).u)


@pytest.mark.parametrize("chunk", [0, 3])
def test_bf16_close_to_float64_reference(chunk, monkeypatch):
    blocks = []  # the key block size each call really ran with
    function = reference_kernel._ReLUAttentionSums
    monkeypatch.setattr(function, "apply", lambda *a, _apply=function.apply: (
        blocks.append(a[5]), _apply(*a))[1])
    q, k, v, pad, blocked = case_tensors("left_pad_causal", dtype=torch.bfloat16)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    result = relu_attention(*leaves, key_padding_mask=pad, attn_mask=blocked,
                            key_chunk_size=chunk, need_statistics=True)
    stats = result.statistics
    (result.out.float().sum() + stats.row_sum.sum() + stats.entropy.sum()).backward()
    wide = [x.double().requires_grad_() for x in (q, k, v)]
    exact = relu_attention(*wide, key_padding_mask=pad, attn_mask=blocked,
                           need_statistics=True)
    (exact.out.sum() + exact.statistics.row_sum.sum() + exact.statistics.entropy.sum()).backward()
    for low, high in zip(leaves, wide):
        assert low.grad.dtype == torch.bfloat16 and torch.isfinite(low.grad).all()
        # entropy's derivative grows like -log s_ij near s_ij = 0, so single entries are
        # ill-conditioned in bf16; the gradient as a whole must stay close
        error = (low.grad.double() - high.grad).norm() / high.grad.norm()
        assert error < 0.05, error
    out, _, row_sum, entropy, _, _ = reference(q.double(), k.double(), v.double(), pad,
                                                blocked)
    assert blocks[0] == (chunk or k.size(-2))  # chunked for chunk 3, one dense block for 0
    assert result.out.dtype == torch.bfloat16
    assert result.statistics.row_sum.dtype == torch.float32
    torch.testing.assert_close(result.out.double(), out, rtol=0.05, atol=0.05)
    torch.testing.assert_close(result.statistics.row_sum.double(), row_sum, rtol=0.05, atol=0.05)
    torch.testing.assert_close(result.statistics.entropy.double(), entropy, rtol=0.05,
                               atol=0.05)


def output_variance(n, variance_reduction):
    generator = torch.Generator().manual_seed(n)
    dim, queries = 64, 64
    q = torch.randn(4, 1, queries, dim, generator=generator)
    k = torch.randn(4, 1, n, dim, generator=generator)
    v = torch.randn(4, 1, n, dim, generator=generator)
    out = relu_attention(q, k, v, variance_reduction=variance_reduction).out
    return out.var().item()


def test_variance_stays_near_one_with_the_factor_and_grows_without():
    lengths = [16, 64, 256, 1024, 4096]
    with_factor = [output_variance(n, True) for n in lengths]
    without = [output_variance(n, False) for n in lengths]
    assert all(1 / 1.5 <= var <= 1.5 for var in with_factor), with_factor
    assert all(b > a for a, b in zip(without, without[1:])), without
    assert without[-1] / without[0] > 100  # ~ n/2: 8 at n=16, 2048 at n=4096


def test_softmax_matches_torch_and_masked_rows_are_zero():
    q, k, v, pad, blocked = case_tensors("left_pad_causal")
    result = normalized_attention(q, k, v, "softmax", key_padding_mask=pad, attn_mask=blocked,
                       need_weights=True, need_statistics=True)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)
    mask = blocked[None, None] | pad[:, None, None, :]
    expected = torch.softmax(scores.masked_fill(mask, -math.inf), -1).nan_to_num(0.0)
    torch.testing.assert_close(result.weights, expected)
    torch.testing.assert_close(result.out, expected @ v)
    rows = result.statistics
    torch.testing.assert_close(rows.row_sum, (rows.n > 0).double())
    entropy = -(expected * expected.clamp(min=1e-300).log()).sum(-1)
    torch.testing.assert_close(rows.entropy, entropy)


@pytest.mark.parametrize("name", ["sparsemax", "entmax15"])
def test_entmax_family_rows_are_sparse_distributions(name):
    import entmax

    q, k, v, pad, blocked = case_tensors("right_pad_self")
    q = q * 4  # sharp scores, so the sparse mappings really drop keys
    result = normalized_attention(q, k, v, name, key_padding_mask=pad, need_weights=True,
                       need_statistics=True)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)
    for b in range(B):
        real = ~pad[b]
        expected = getattr(entmax, name)(scores[b][..., real], dim=-1)
        torch.testing.assert_close(result.weights[b][..., real], expected)
        assert torch.all(result.weights[b][..., ~real] == 0)
    torch.testing.assert_close(result.weights.sum(-1), torch.ones(B, H, 7, dtype=torch.float64))
    assert result.statistics.zeros.sum() > 0


@pytest.mark.parametrize("name", ["sparsemax", "entmax15"])
@pytest.mark.parametrize("case", ["left_pad_causal", "cross_right_pad"])
@pytest.mark.parametrize("sharpness", [0.1, 4.0])
def test_entmax_family_partial_sort_equals_full_sort_bit_for_bit(name, case, sharpness):
    # partial_sort=2 makes most rows' support fill the first top-k and be redone (2, 4, 8...):
    # the recursion is what keeps the result exact, so it must be exercised
    q, k, v, pad, blocked = case_tensors(case, dtype=torch.float32)
    grad = torch.randn_like(q)
    results = []
    for partial_sort in (None, 2):
        leaves = [t.clone().requires_grad_() for t in (q * sharpness, k, v)]
        result = normalized_attention(*leaves, name, key_padding_mask=pad, attn_mask=blocked,
                                      need_weights=True, partial_sort=partial_sort)
        result.out.backward(grad)
        results.append([result.out, result.weights] + [t.grad for t in leaves])
    supports = (results[0][1] > 0).sum(-1)
    assert supports.max() > 2  # some row needed the redo
    for full, partial in zip(*results):
        assert torch.equal(full, partial)


def test_rela_is_rms_normalised_relu_output():
    q, k, v, pad, blocked = case_tensors("cross_right_pad")
    gain = torch.rand(H, 1, D, dtype=torch.float64) + 0.5
    for chunk in (0, 4):
        result = rela_attention(q, k, v, gain, key_padding_mask=pad, key_chunk_size=chunk,
                                need_weights=True)
        out, _, _, _, _, _ = reference(q, k, v, pad, None, factor=False)
        rms = out.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()
        torch.testing.assert_close(result.out, out / rms * gain)
        torch.testing.assert_close(result.weights @ v, out)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_every_activation_one_interface_no_nan_on_empty_rows(name):
    q, k, v, blocked = all_zero_rows()
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    gain = {"gain": torch.ones(q.size(-1), dtype=q.dtype)} if name == "rela" else {}
    result = bind_attention(name)(*leaves, attn_mask=blocked, need_weights=True,
                                  need_statistics=True, **gain)
    assert result.out.shape == q.shape and result.weights.shape == (B, H, 4, 5)
    result.out.sum().backward()
    assert all(torch.isfinite(x.grad).all() for x in leaves)
    assert torch.all(result.weights[..., 2, :] == 0)
    assert result.statistics.regularizable == (name == "relu")


def test_unknown_activation_names_the_flag():
    with pytest.raises(ValueError, match="--attention-activation 'gelu' is unknown"):
        check_activation("gelu")


def test_missing_entmax_names_the_flag(monkeypatch):
    monkeypatch.setitem(sys.modules, "entmax", None)  # `import entmax` raises ImportError
    with pytest.raises(ImportError, match="--attention-activation sparsemax needs the 'entmax'"):
        check_activation("sparsemax")
    check_activation("relu")  # the others do not need it
