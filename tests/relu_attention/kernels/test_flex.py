"""The FlexAttention path (CUDA's fused kernel) checked on the CPU with FlexAttention's eager
implementation, against the float64 reference of the tiled kernel's tests."""

import pytest
import torch

from relu_former.relu_attention.kernels.flex import flex_available, flex_relu_sums
from tests.relu_attention.kernels.test_tiled import CASES, make, reference

flex_module = pytest.importorskip("torch.nn.attention.flex_attention")


@pytest.fixture(autouse=True)
def eager_flex_on_cpu(monkeypatch):
    """FlexAttention refuses backward on the CPU at its entry check; its eager implementation
    (the one this test needs) runs there, so the check is lifted for these tests only."""
    if not hasattr(flex_module, "_validate_device"):
        pytest.skip("this torch's FlexAttention has no device check to lift")
    monkeypatch.setattr(flex_module, "_validate_device", lambda *args, **kwargs: None)


def statistics(sums, n):
    safe = torch.where(sums.row_sum > 0, sums.row_sum, torch.ones_like(sums.row_sum))
    entropy = torch.where(sums.row_sum > 0, torch.log(safe) - sums.xlogx / safe, 0.0)
    out = sums.u / torch.sqrt(n.clamp(min=1) / 2).unsqueeze(-1)
    return out, sums.row_sum, entropy, n - sums.positives


# On the CPU flex_attention runs its eager, unfused path on purpose (the test checks values,
# not speed), and says so in a warning that is expected here.
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("name", list(CASES))
def test_flex_equals_the_float64_reference(name):
    tgt_len, src_len, pad, blocked = CASES[name]
    leaves = [x.requires_grad_() for x in make(tgt_len, src_len)]
    want = reference(*leaves, pad, blocked)
    sums = flex_relu_sums(*leaves, key_padding_mask=pad, attn_mask=blocked, compiled=False)
    got = statistics(sums, want[4])
    for a, b in zip(got, want[:4]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    weights = [torch.randn(x.shape, dtype=torch.float64) for x in want[:3]]

    def loss(values):
        return sum((x * w).sum() for x, w in zip(values[:3], weights))

    for a, b in zip(torch.autograd.grad(loss(got), leaves),
                    torch.autograd.grad(loss(want), leaves)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_rows_with_no_positive_score_give_zero_without_nan():
    q, k, v = (x.requires_grad_() for x in make(3, 4))
    with torch.no_grad():
        q[0, 0] = 0  # a zero query: every score is 0
    sums = flex_relu_sums(q, k, v, compiled=False)
    assert (sums.u[0, 0] == 0).all() and (sums.row_sum[0, 0] == 0).all()
    grads = torch.autograd.grad(sums.u.sum() + sums.row_sum.sum() + sums.xlogx.sum(), (q, k, v))
    assert all(torch.isfinite(g).all() for g in grads)


def test_auto_takes_flex_on_cuda_only(monkeypatch):
    """FlexAttention on the CPU is the eager reference path: auto never takes it there,
    even where FlexAttention imports (on CUDA: test_backend_choice.py)."""
    from relu_former.relu_attention.kernels import dispatch

    q = torch.zeros(1, 1, 1, 4)
    assert not flex_available(q)
    monkeypatch.setattr(dispatch, "flex_available", lambda q: True)
    monkeypatch.setitem(dispatch.BACKENDS, "flex", lambda *a, **kw: pytest.fail("took flex"))
    for dropout in (0.0, 0.1):
        assert dispatch.relu_sums(q, q, q, dropout_p=dropout).u.shape == (1, 1, 1, 4)
