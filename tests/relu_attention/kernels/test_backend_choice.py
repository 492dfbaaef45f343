"""Which backend runs: auto's choice on each device, forced backends, the model flag."""

from types import SimpleNamespace

import pytest
import torch

from relu_former.errors import OptionError
from relu_former.relu_attention.activations import relu_attention
from relu_former.relu_attention.config import AttentionSettings
from relu_former.relu_attention.kernels import dispatch


def on(device_type):
    return SimpleNamespace(device=SimpleNamespace(type=device_type))


@pytest.mark.parametrize("triton,flex,dropout,want", [
    (True, True, 0.0, "triton"),   # CUDA with triton: always the Triton kernel
    (True, True, 0.1, "triton"),
    (False, True, 0.0, "flex"),    # no triton: FlexAttention without dropout ...
    (False, True, 0.1, "tiled"),   # ... the tiled kernel with it
    (False, False, 0.0, "tiled"),
])
def test_auto_on_cuda(monkeypatch, triton, flex, dropout, want):
    monkeypatch.setattr(dispatch, "triton_available", lambda q: triton)
    monkeypatch.setattr(dispatch, "flex_available", lambda q: flex)
    monkeypatch.setattr(dispatch, "first_use_problem", lambda *a, **kw: "")  # checks pass
    assert dispatch.resolve_backend("auto", on("cuda"), dropout) == want


@pytest.mark.parametrize("compiled, want", [(True, "cpp"), (False, "tiled")])
def test_auto_on_the_cpu_is_the_compiled_kernel_else_tiled_never_triton(monkeypatch, compiled,
                                                                         want):
    # the interpreter makes triton "available" on the CPU; auto must not pick it there
    monkeypatch.setattr(dispatch, "triton_available", lambda q: True)
    monkeypatch.setattr(dispatch, "compiled_available", lambda q: compiled)
    for dropout in (0.0, 0.1):
        assert dispatch.resolve_backend("auto", on("cpu"), dropout) == want


def test_a_bound_backend_resolves_auto_once_per_device_and_dropout(monkeypatch):
    bound = dispatch.BoundBackend("auto")
    q = torch.zeros(1, 1, 2, 4)
    first = bound.kernel(q, 0.0)
    monkeypatch.setattr(dispatch, "resolve_backend", lambda *a: pytest.fail("resolved again"))
    assert bound.kernel(q, 0.0) is first
    with pytest.raises(BaseException, match="resolved again"):
        bound.kernel(q, 0.1)  # dropout on is another kind of input


def test_forced_backends_that_cannot_run_say_why():
    q = torch.zeros(1, 1, 2, 4)
    with pytest.raises(ValueError, match="triton backend cannot run here: triton needs a "
                       "CUDA tensor .got cpu"):
        dispatch.relu_sums(q, q, q, backend="triton")
    with pytest.raises(ValueError, match="no attention dropout"):
        dispatch.relu_sums(q, q, q, backend="flex", dropout_p=0.1)
    with pytest.raises(ValueError, match="backend 'cuda' is unknown"):
        dispatch.relu_sums(q, q, q, backend="cuda")
    assert dispatch.resolve_backend("tiled", q, 0.1) == "tiled"


def test_a_forced_tiled_backend_equals_the_reference():
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 7, 4, generator=generator, dtype=torch.float64)
               for _ in range(3))
    pad = torch.zeros(2, 7, dtype=torch.bool)
    pad[0, -2:] = True
    forced = relu_attention(q, k, v, key_padding_mask=pad, need_statistics=True,
                            backend="tiled")
    dense = relu_attention(q, k, v, key_padding_mask=pad, need_statistics=True,
                           backend="reference")
    torch.testing.assert_close(forced.out, dense.out)
    torch.testing.assert_close(forced.statistics.entropy, dense.statistics.entropy)


@pytest.mark.parametrize("flag,want", [("fused", "auto"), ("reference", "reference"),
                                       ("triton", "triton"), ("flex", "flex"),
                                       ("tiled", "tiled")])
def test_the_deprecated_attention_kernel_flag_reaches_the_module(flag, want):
    from relu_former.relu_attention.model import build_attention

    settings = AttentionSettings.from_cfg(SimpleNamespace(attention_kernel=flag))
    module = build_attention(settings, "encoder", 8, 2, self_attention=True)
    assert module.attention_backend == want


@pytest.mark.parametrize("backend", ["auto", "reference", "tiled", "flex", "triton"])
def test_the_attention_backend_flag_reaches_the_module(backend):
    from relu_former.relu_attention.model import build_attention

    settings = AttentionSettings.from_cfg(SimpleNamespace(attention_backend=backend))
    assert build_attention(settings, "cross", 8, 2).attention_backend == backend


def test_an_unknown_kernel_names_the_flag():
    with pytest.raises(OptionError, match="--attention-kernel"):
        AttentionSettings.from_cfg(SimpleNamespace(attention_kernel="cuda"))
