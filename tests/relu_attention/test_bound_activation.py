"""The activation is bound when the module is built: a relu_former attention forward, for every
activation, compares no activation name, calls nothing of ``importlib`` and probes no attribute
with ``getattr`` in the plugin's attention code (traced with ``sys.setprofile``)."""

import builtins
import sys
from pathlib import Path

import pytest
import torch

from relu_former.relu_attention import activations
from relu_former.relu_attention.activations import ACTIVATIONS
from relu_former.relu_attention.attention import ActivationMultiheadAttention

ATTENTION_CODE = {str(Path(activations.__file__).parent / name)
                  for name in ("activations.py", "attention.py")}


class WatchedName(str):
    """An activation name that counts the comparisons made with it."""

    compared = 0

    def __eq__(self, other):
        WatchedName.compared += 1
        return str.__eq__(self, other)

    def __ne__(self, other):
        WatchedName.compared += 1
        return str.__ne__(self, other)

    __hash__ = str.__hash__


def traced_forward(module, *inputs, **kwargs) -> dict:
    """What a forward of ``module`` did: importlib frames entered, builtin ``getattr`` calls
    made from the attention code, comparisons with its activation name."""
    seen = {"importlib": [], "getattr": []}

    def profile(frame, event, arg):
        code = frame.f_code
        # importlib/*.py, or <frozen importlib._bootstrap>
        if event == "call" and "importlib" in code.co_filename:
            seen["importlib"].append(code.co_name)
        elif event == "c_call" and arg is builtins.getattr \
                and code.co_filename in ATTENTION_CODE:
            seen["getattr"].append(f"{Path(code.co_filename).name}:{frame.f_lineno}")

    WatchedName.compared = 0
    sys.setprofile(profile)
    try:
        module(*inputs, **kwargs)
    finally:
        sys.setprofile(None)
    seen["compared"] = WatchedName.compared
    return seen


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("need_weights", [False, True])
def test_a_forward_compares_no_activation_name_and_imports_nothing(activation, need_weights):
    module = ActivationMultiheadAttention(16, 2, self_attention=True,
                                          activation=WatchedName(activation)).eval()
    x = torch.randn(5, 2, 16)
    module(x, x, x, need_weights=need_weights)  # the first call resolves the backend
    seen = traced_forward(module, x, x, x, need_weights=need_weights)
    assert seen == {"importlib": [], "getattr": [], "compared": 0}, seen
