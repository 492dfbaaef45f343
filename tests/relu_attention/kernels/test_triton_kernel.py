"""The Triton kernel against a float64 formula: values, statistics, gradients, masks, dropout.

Runs where triton is importable and either a CUDA device is present or ``TRITON_INTERPRET=1``
is set (Triton's CPU interpreter; ``make test-triton`` sets it up, docs/testing.md); it skips
otherwise. Sizes stay tiny (Tq, Tk <= 40, head size 16) because the interpreter evaluates
every block in numpy. Blocks of 16 queries x 16 keys make every case cross block borders.

The last test applies small mutations to the kernel's source (a flipped sign, a dropped mask,
a dropout not replayed) and checks that the same comparisons catch each of them.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (make test-triton installs it)")
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
if not INTERPRET and not torch.cuda.is_available():
    pytest.skip("no CUDA device and TRITON_INTERPRET is not set", allow_module_level=True)

from relu_former.relu_attention.kernels import triton_kernel  # noqa: E402
from relu_former.relu_attention.kernels.reference import reference_relu_sums as relu_sums  # noqa: E402,E501

DEVICE = "cpu" if INTERPRET else "cuda"
B, H, D = 2, 2, 16
BLOCKS = dict(block_m=16, block_n=16)


def causal(tgt_len, src_len):
    return torch.triu(torch.ones(tgt_len, src_len, dtype=torch.bool), 1 + src_len - tgt_len)


def padding(src_len, left=False):
    pad = torch.zeros(B, src_len, dtype=torch.bool)
    if left:
        pad[1, :5] = True
    else:
        pad[0, -7:] = True
    return pad


def general_mask(tgt_len, src_len):
    """(B, 1, Tq, Tk): random blocks, one row that sees nothing, one that sees one key."""
    mask = torch.rand(B, 1, tgt_len, src_len, generator=torch.Generator().manual_seed(4)) < 0.4
    mask[0, 0, 3] = True
    mask[1, 0, 5] = True
    mask[1, 0, 5, 2] = False
    return mask


# name: (Tq, Tk, key padding, attention mask)
CASES = {
    "no_mask": (33, 40, None, None),
    "self_right_pad": (35, 35, padding(35), None),
    "self_left_pad_causal": (34, 34, padding(34, left=True), causal(34, 34)),
    "cross_pad": (17, 38, padding(38), None),
    "general_4d_mask_and_pad": (40, 21, padding(21, left=True), general_mask(40, 21)),
}


def make(tgt_len, src_len, dtype=torch.float64, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, t, D, generator=generator, dtype=torch.float64)
            .to(device=DEVICE, dtype=dtype).requires_grad_()
            for t in (tgt_len, src_len, src_len)]


def formula(q, k, v, pad=None, blocked=None, keep=None, p=0.0):
    """float64, plain autograd: U = sum_j s_ij m_ij/(1-p) v_j, S, T = sum s log s, P."""
    q, k, v = q.double(), k.double(), v.double()
    visible = torch.ones(B, 1, q.size(2), k.size(2), dtype=torch.bool, device=q.device)
    if pad is not None:
        visible = visible & ~pad[:, None, None, :].to(q.device)
    if blocked is not None:
        blocked = blocked.to(q.device)
        visible = visible & ~(blocked if blocked.dim() == 4 else blocked[None, None])
    s = torch.relu(q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))) * visible
    dropped = s if keep is None else s * keep.view(s.shape).double() / (1 - p)
    u = dropped @ v
    xlogx = (s * torch.log(torch.where(s > 0, s, 1.0))).sum(-1)
    return u, s.sum(-1), xlogx, (s > 0).sum(-1).double()


def masks_on_device(pad, blocked):
    return (None if pad is None else pad.to(DEVICE),
            None if blocked is None else blocked.to(DEVICE))


def check(module, name, dtype=torch.float64, dropout_p=0.0, seed=11, tolerance=1e-10):
    """Raises AssertionError unless ``module``'s kernel equals the formula on case ``name``:
    U, S, T, P and the gradients of q, k, v through U, S and T."""
    tgt_len, src_len, pad, blocked = CASES[name]
    leaves = make(tgt_len, src_len, dtype)
    pad_d, blocked_d = masks_on_device(pad, blocked)
    got = module.triton_relu_sums(*leaves, key_padding_mask=pad_d, attn_mask=blocked_d,
                                  dropout_p=dropout_p, seed=seed, **BLOCKS)
    keep = None
    if dropout_p:
        keep = module.dropout_keep_mask(B * H, tgt_len, src_len, dropout_p, seed, DEVICE)
    want = formula(*leaves, pad, blocked, keep, dropout_p)
    assert got.scores is None
    assert got.u.dtype == dtype
    stat_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    for a, b in zip(got[:4], want):
        assert a.dtype in (dtype, stat_dtype)
        torch.testing.assert_close(a.double(), b, atol=tolerance, rtol=tolerance)
    generator = torch.Generator().manual_seed(1)
    weights = [torch.randn(x.shape, generator=generator, dtype=torch.float64).to(DEVICE)
               for x in want[:3]]

    def loss(values):
        return sum((x.double() * w).sum() for x, w in zip(values[:3], weights))

    got_grads = torch.autograd.grad(loss(got), leaves)
    want_grads = torch.autograd.grad(loss(want), leaves)
    for a, b in zip(got_grads, want_grads):
        torch.testing.assert_close(a.double(), b.double(), atol=tolerance * 10,
                                   rtol=tolerance * 10)


@pytest.mark.parametrize("name", list(CASES))
def test_values_statistics_and_gradients_equal_the_float64_formula(name):
    check(triton_kernel, name)


def test_equals_the_projects_reference_kernel():
    tgt_len, src_len, pad, blocked = CASES["general_4d_mask_and_pad"]
    q, k, v = make(tgt_len, src_len)
    pad_d, blocked_d = masks_on_device(pad, blocked)
    got = triton_kernel.triton_relu_sums(q, k, v, key_padding_mask=pad_d, attn_mask=blocked_d,
                                         **BLOCKS)
    want = relu_sums(q, k, v, key_padding_mask=pad_d, attn_mask=blocked_d)
    for a, b in zip(got[:4], want[:4]):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("name", ["self_left_pad_causal", "cross_pad"])
def test_dropout_is_replayed_in_backward(name):
    """The float64 formula with the keep mask the kernels' own generator draws equals the
    kernel in U and in every gradient: forward and backward applied the same mask."""
    check(triton_kernel, name, dropout_p=0.3, seed=12345)


def test_dropout_mask_rate_seed_and_statistics():
    tgt_len, src_len = 40, 40
    keep = triton_kernel.dropout_keep_mask(B * H, tgt_len, src_len, 0.3, 5, DEVICE)
    again = triton_kernel.dropout_keep_mask(B * H, tgt_len, src_len, 0.3, 5, DEVICE)
    other = triton_kernel.dropout_keep_mask(B * H, tgt_len, src_len, 0.3, 6, DEVICE)
    assert torch.equal(keep, again)
    assert not torch.equal(keep, other)
    assert not torch.equal(keep[0], keep[1])  # heads draw different masks
    rate = keep.float().mean().item()
    standard_error = math.sqrt(0.3 * 0.7 / keep.numel())
    assert abs(rate - 0.7) < 5 * standard_error
    # the statistics are those of the undropped scores
    q, k, v = make(tgt_len, src_len)
    plain = triton_kernel.triton_relu_sums(q, k, v, **BLOCKS)
    dropped = triton_kernel.triton_relu_sums(q, k, v, dropout_p=0.3, seed=5, **BLOCKS)
    torch.testing.assert_close(dropped.row_sum, plain.row_sum)
    assert not torch.allclose(dropped.u, plain.u)


def test_gradcheck_with_dropout_and_a_causal_mask():
    leaves = [torch.randn(1, 1, t, 2, dtype=torch.float64, device=DEVICE, requires_grad=True)
              for t in (5, 6, 6)]

    def function(q, k, v):
        sums = triton_kernel.triton_relu_sums(q, k, v, attn_mask=causal(5, 6).to(DEVICE),
                                              dropout_p=0.4, seed=3, **BLOCKS)
        return sums.u, sums.row_sum, sums.xlogx

    assert torch.autograd.gradcheck(function, leaves)


def test_need_sums_false_computes_u_only():
    tgt_len, src_len, pad, blocked = CASES["self_left_pad_causal"]
    q, k, v = make(tgt_len, src_len)
    pad_d, blocked_d = masks_on_device(pad, blocked)
    got = triton_kernel.triton_relu_sums(q, k, v, key_padding_mask=pad_d, attn_mask=blocked_d,
                                         need_sums=False, **BLOCKS)
    assert got.row_sum is None and got.xlogx is None and got.positives is None
    want = formula(q, k, v, pad, blocked)
    torch.testing.assert_close(got.u, want[0], atol=1e-10, rtol=1e-10)
    grads = torch.autograd.grad(got.u.sum(), (q, k, v))
    for a, b in zip(grads, torch.autograd.grad(want[0].sum(), (q, k, v))):
        torch.testing.assert_close(a, b, atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
def test_low_precision_accumulates_in_float32(dtype, tolerance):
    check(triton_kernel, "cross_pad", dtype=dtype, tolerance=tolerance)


def test_bad_input_is_refused_with_a_clear_error():
    q, k, v = make(4, 5)
    with pytest.raises(ValueError, match="dropout_p"):
        triton_kernel.triton_relu_sums(q, k, v, dropout_p=1.0)
    with pytest.raises(ValueError, match="block_m"):
        triton_kernel.triton_relu_sums(q, k, v, block_m=24)
    with pytest.raises(TypeError, match="share"):
        triton_kernel.triton_relu_sums(q, k.float(), v)


def load_mutant(source: str, tmp_path: Path, tag: str):
    path = tmp_path / f"triton_kernel_mutant_{tag}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # triton reads the jitted functions' source by module
    spec.loader.exec_module(module)
    return module


# (what the mutation breaks, original text, wrong text, the check that must catch it)
MUTATIONS = [
    ("sign of dk", "(dk * scale).to(", "(-dk * scale).to(", {}),
    ("row-sum gradient", "ds += shift[:, None]", "ds -= shift[:, None]", {}),
    ("row sum", "row_sum += tl.sum(s, 1)", "row_sum += tl.sum(s * s, 1)", {}),
    ("attention mask ignored", "(blocked == 0)", "(blocked >= 0)", {}),
    ("dropout not replayed in dv",
     "                dropped)\n", "                s)\n", {"dropout_p": 0.3}),
]


@pytest.mark.parametrize("what,original,wrong,options", MUTATIONS,
                         ids=[m[0] for m in MUTATIONS])
def test_a_deliberately_wrong_kernel_fails_the_comparison(what, original, wrong, options,
                                                          tmp_path):
    source = Path(triton_kernel.__file__).read_text()
    assert source.count(original) == 1, f"mutation site for {what!r} not found"
    mutant = load_mutant(source.replace(original, wrong), tmp_path, str(abs(hash(what))))
    try:
        with pytest.raises(AssertionError):
            check(mutant, "general_4d_mask_and_pad", **options)
    finally:
        sys.modules.pop(mutant.__name__, None)


def test_the_kernel_passes_the_first_use_check_and_a_wrong_one_does_not(tmp_path):
    """The check auto runs before it trusts the kernel on a GPU (first_use_check.py) passes
    the kernel, its mask read off the kernel's own Philox dropout, and fails a kernel whose
    backward does not replay the dropout."""
    from relu_former.relu_attention.kernels.first_use_check import first_use_problem

    q = torch.zeros(1, 1, 1, D, device=DEVICE)
    assert first_use_problem("triton", triton_kernel.triton_relu_sums, q, True) == ""
    what, original, wrong, _ = MUTATIONS[-1]
    mutant = load_mutant(Path(triton_kernel.__file__).read_text().replace(original, wrong),
                         tmp_path, "first_use")
    try:
        problem = first_use_problem("mutant", mutant.triton_relu_sums, q, True)
    finally:
        sys.modules.pop(mutant.__name__, None)
    assert problem.startswith("dv differs from the float64 reference") and \
        "(dropout 0.25" in problem, problem
