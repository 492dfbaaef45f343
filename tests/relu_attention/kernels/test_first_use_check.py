"""The first-use check of the compiled GPU backends, and auto's fallback when one fails it.

No GPU here: a faulty Triton kernel is substituted (raising, or returning wrong sums, wrong
gradients or a dropout mask that backward does not replay), and the CPU is made to look like
CUDA to the dispatcher by giving it CUDA's rows of ``AUTO_ORDER`` and ``FIRST_USE_CHECKED``.
"""

import logging
import re

import pytest
import torch

from relu_former.relu_attention.activations import bind_attention
from relu_former.relu_attention.kernels import dispatch, first_use_check
from relu_former.relu_attention.kernels.first_use_check import first_use_problem
from relu_former.relu_attention.kernels.tiled import tiled_relu_sums


@pytest.fixture(autouse=True)
def fresh_process_state(monkeypatch):
    """Each test starts as a new process would: nothing checked, nothing warned."""
    monkeypatch.setattr(first_use_check, "_results", {})
    monkeypatch.setattr(dispatch, "_warned", set())


def scaled(factor, field):
    """The tiled kernel with one output off by ``factor``."""
    def kernel(*args, **kwargs):
        sums = tiled_relu_sums(*args, **kwargs)
        value = getattr(sums, field)
        return sums._replace(**{field: None if value is None else value * factor})
    return kernel


def wrong_gradient(*args, **kwargs):
    """Right values, gradients of twice U."""
    sums = tiled_relu_sums(*args, **kwargs)
    return sums._replace(u=2 * sums.u - sums.u.detach())


def unreplayed_dropout(q, k, v, *, seed=None, **kwargs):
    """Forward with one dropout mask, backward with another (no replay)."""
    forward = tiled_relu_sums(q, k, v, seed=seed, **kwargs)
    backward = tiled_relu_sums(q, k, v, seed=(seed or 0) + 1, **kwargs)
    return forward._replace(u=backward.u + (forward.u - backward.u).detach())


def raising(*args, **kwargs):
    raise RuntimeError("out of resource: shared memory, Required: 132096, Hardware limit: 101376")


def q_like(dtype=torch.float32, head_dim=16):
    return torch.zeros(1, 1, 1, head_dim, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("head_dim", [16, 64])
def test_a_correct_backend_passes_with_and_without_dropout(dtype, head_dim):
    """The tiled kernel (its own dropout generator, tiles of its own) passes: the check reads
    each backend's mask off the backend itself."""
    assert first_use_problem("tiled", tiled_relu_sums, q_like(dtype, head_dim), True) == ""


@pytest.mark.parametrize("kernel, dropout, want", [
    (scaled(1.1, "u"), False, "U differs"),
    (scaled(1.1, "row_sum"), False, "S differs"),
    (scaled(0.5, "xlogx"), False, "T differs"),
    (scaled(2.0, "positives"), False, "P differs"),
    (wrong_gradient, False, "dq differs"),
    (unreplayed_dropout, True, r"d[qkv] differs from the float64 reference by .* \(dropout 0.25"),
    (raising, False, "raised RuntimeError: out of resource: shared memory"),
])
def test_a_faulty_backend_fails_naming_what(kernel, dropout, want):
    problem = first_use_problem("triton", kernel, q_like(), dropout)
    assert problem and re.search(want, problem), problem


def test_nan_fails():
    assert "U differs" in first_use_problem("triton", scaled(float("nan"), "u"), q_like(), False)


def test_the_check_leaves_the_callers_random_stream_and_grad_mode_alone():
    torch.manual_seed(5)
    want = torch.rand(3)
    torch.manual_seed(5)
    with torch.no_grad():
        assert first_use_problem("tiled", tiled_relu_sums, q_like(), True) == ""
        assert not torch.is_grad_enabled()
    assert torch.equal(torch.rand(3), want)


@pytest.fixture
def cpu_as_cuda(monkeypatch):
    """The CPU treated as CUDA without FlexAttention by the dispatcher: triton first,
    checked on first use, then tiled."""
    for dropout in (False, True):
        monkeypatch.setitem(dispatch.AUTO_ORDER, ("cpu", dropout), ("triton", "tiled"))
    monkeypatch.setitem(dispatch.FIRST_USE_CHECKED, "cpu", dispatch.FIRST_USE_CHECKED["cuda"])
    monkeypatch.setattr(dispatch, "triton_available", lambda q: True)


def substitute_triton(monkeypatch, kernel):
    """Put ``kernel`` in the table as triton; returns the list its calls are counted in."""
    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return kernel(*args, **kwargs)

    monkeypatch.setitem(dispatch.BACKENDS, "triton", counted)
    return calls


def inputs():
    generator = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, 9, 16, generator=generator).requires_grad_()
               for _ in range(3))
    return q, k, v


@pytest.mark.parametrize("dropout_p", [0.0, 0.1])
@pytest.mark.parametrize("kernel, cause", [(scaled(1.1, "u"), "U differs"),
                                           (raising, "raised RuntimeError")])
def test_auto_passes_over_a_faulty_triton_and_warns_once(monkeypatch, caplog, cpu_as_cuda,
                                                         kernel, cause, dropout_p):
    calls = substitute_triton(monkeypatch, kernel)
    q, k, v = inputs()
    with caplog.at_level(logging.WARNING, logger=dispatch.__name__):
        for _ in range(2):  # two models in one process: one check, one warning
            attention = bind_attention("relu", backend="auto")
            out = attention(q, k, v, dropout_p=dropout_p).out
            out.sum().backward()
    checked = len(calls)
    assert checked > 0  # the check ran the substitute; training then never did
    want = bind_attention("relu", backend="tiled")(q, k, v, dropout_p=dropout_p).out
    if not dropout_p:
        torch.testing.assert_close(out, want)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert all(part in warnings[0] for part in (
        "ReLU attention on cpu: triton failed its first-use check", cause,
        "running the tiled backend instead", "report it", "relu_former.help --backends")), \
        warnings[0]
    assert len(calls) == checked  # the result is kept for the process
    assert dispatch.resolve_backend("auto", q, dropout_p) == "tiled" and len(calls) == checked


def test_a_forced_triton_that_fails_its_check_fails_loudly(monkeypatch, cpu_as_cuda):
    substitute_triton(monkeypatch, scaled(1.1, "u"))
    q, k, v = inputs()
    with pytest.raises(RuntimeError, match="triton failed its first-use check: U differs"):
        bind_attention("relu", backend="triton")(q, k, v)


def test_a_triton_that_passes_is_taken(monkeypatch, cpu_as_cuda, caplog):
    calls = substitute_triton(monkeypatch, tiled_relu_sums)
    q, k, v = inputs()
    with caplog.at_level(logging.WARNING):
        assert dispatch.resolve_backend("auto", q, 0.1) == "triton"
    assert calls and not caplog.records
    checked = len(calls)
    bind_attention("relu")(q, k, v, dropout_p=0.1)
    assert len(calls) == checked + 1  # the training's own call


def test_the_check_result_is_per_device_and_dtype(monkeypatch, cpu_as_cuda):
    calls = substitute_triton(monkeypatch, scaled(1.1, "u"))
    dispatch.resolve_backend("auto", q_like(torch.float32), 0.0)
    once = len(calls)
    dispatch.resolve_backend("auto", q_like(torch.float32), 0.0)
    assert len(calls) == once
    dispatch.resolve_backend("auto", q_like(torch.float64), 0.0)
    assert len(calls) > once


def test_the_tables_name_real_backends():
    """Every checked backend is in the table, and every auto order ends in one that runs
    everywhere."""
    for names in dispatch.FIRST_USE_CHECKED.values():
        assert set(names) <= set(dispatch.BACKENDS)
    for names in dispatch.AUTO_ORDER.values():
        assert names[-1] == "tiled" and set(names) <= set(dispatch.BACKENDS)



def test_the_backends_report_says_why_triton_was_passed_over(monkeypatch, cpu_as_cuda):
    from relu_former.relu_attention.kernels.backend_report import backends_report

    substitute_triton(monkeypatch, raising)
    assert ("cpu: auto picks tiled (triton failed its first-use check: raised RuntimeError: "
            "out of resource: shared memory") in backends_report()
