"""Which fused kernel runs: auto's choice on each device, forced backends, the model flag."""

from types import SimpleNamespace

import pytest
import torch

from relu_former.errors import OptionError
from relu_former.relu_attention.kernels import tiled
from relu_former.relu_attention.kernels.reference import relu_attention
from relu_former.relu_attention.model import AttentionSettings


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
    monkeypatch.setattr(tiled, "triton_available", lambda q: triton)
    monkeypatch.setattr(tiled, "flex_available", lambda q: flex)
    assert tiled.choose_backend(on("cuda"), dropout) == want


def test_auto_on_the_cpu_is_the_tiled_kernel_even_with_triton(monkeypatch):
    # the interpreter makes triton "available" on the CPU; auto must not pick it there
    monkeypatch.setattr(tiled, "triton_available", lambda q: True)
    assert tiled.choose_backend(on("cpu"), 0.1) == "tiled"


def test_forced_backends_that_cannot_run_say_why():
    q = torch.zeros(1, 1, 2, 4)
    with pytest.raises(ValueError, match="triton backend needs a CUDA tensor"):
        tiled.choose_backend(q, 0.0, "triton")
    with pytest.raises(ValueError, match="no attention dropout"):
        tiled.choose_backend(q, 0.1, "flex")
    with pytest.raises(ValueError, match="backend must be one of"):
        tiled.choose_backend(q, 0.0, "cuda")
    assert tiled.choose_backend(q, 0.1, "tiled") == "tiled"


def test_a_forced_tiled_backend_equals_the_reference():
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 7, 4, generator=generator, dtype=torch.float64)
               for _ in range(3))
    pad = torch.zeros(2, 7, dtype=torch.bool)
    pad[0, -2:] = True
    forced = relu_attention(q, k, v, key_padding_mask=pad, need_statistics=True, fused="tiled")
    dense = relu_attention(q, k, v, key_padding_mask=pad, need_statistics=True, fused=False)
    torch.testing.assert_close(forced.out, dense.out)
    torch.testing.assert_close(forced.statistics.entropy, dense.statistics.entropy)


@pytest.mark.parametrize("flag,want", [("fused", True), ("reference", False),
                                       ("triton", "triton"), ("flex", "flex"),
                                       ("tiled", "tiled")])
def test_the_attention_kernel_flag_reaches_the_module(flag, want):
    settings = AttentionSettings.from_cfg(SimpleNamespace(attention_kernel=flag))
    module = settings.build_attention("encoder", 8, 2, self_attention=True)
    assert module.fused_kernel == want


def test_an_unknown_kernel_names_the_flag():
    with pytest.raises(OptionError, match="--attention-kernel"):
        AttentionSettings.from_cfg(SimpleNamespace(attention_kernel="cuda"))
