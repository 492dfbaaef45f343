"""A relu_former forward reaches its ReLU kernel within 4 Python frames of the module's forward:
the activation and its backend are bound when the module is built, not looked up per call."""

import sys

import pytest
import torch

from relu_former.relu_attention.attention import ActivationMultiheadAttention
from relu_former.relu_attention.kernels import dispatch

KERNELS = {function.__name__ for function in dispatch.BACKENDS.values()}


def frames_to_kernel(module, *inputs, **kwargs):
    """Python frames from the module's ``forward`` to the first kernel call, and the kernel."""
    depth, found = [0], {}

    def profile(frame, event, arg):
        if event == "call":
            depth[0] += 1
            code = frame.f_code
            if code.co_name == "forward" and frame.f_locals.get("self") is module:
                found.setdefault("forward", depth[0])
            elif code.co_name in KERNELS and "forward" in found:
                found.setdefault("kernel", (depth[0], code.co_name))
        elif event == "return":
            depth[0] -= 1

    sys.setprofile(profile)
    try:
        module(*inputs, **kwargs)
    finally:
        sys.setprofile(None)
    kernel_depth, name = found["kernel"]
    return kernel_depth - found["forward"], name


@pytest.mark.parametrize("backend", ["auto", "tiled", "reference"])
@pytest.mark.parametrize("kind", ["self", "cross"])
def test_the_kernel_is_within_four_frames_of_forward(backend, kind):
    module = ActivationMultiheadAttention(16, 2, self_attention=kind == "self",
                                          encoder_decoder_attention=kind == "cross",
                                          activation="relu", attention_backend=backend).train()
    x = torch.randn(5, 2, 16)
    memory = torch.randn(7, 2, 16)
    key = x if kind == "self" else memory
    module(x, key, key)  # the first call resolves ``auto`` for this device
    frames, name = frames_to_kernel(module, x, key, key)
    assert frames <= 4, (frames, name)
    if backend != "auto":
        assert name == dispatch.BACKENDS[backend].__name__
