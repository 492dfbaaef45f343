"""NaN and inf reach the same places on every backend as in the float64 reference.

A model that diverged must look diverged on every machine: one NaN or inf in q, k or v gives,
on each backend available here and in each dtype it runs, the same non-finite entries of U, S,
T and P and of the gradients of q, k and v as the float64 reference backend given the same
values. Cases: NaN, inf and -inf in each of q, k and v; no mask, and key padding with a causal
mask, where the bad key is hidden from the first queries; gradients through U alone and through
U, S and T; with and without dropout (a dropped NaN stays NaN, so the places do not depend on
which entries a backend's generator drops). flex runs its eager implementation (the CUDA path
is compiled from the same score modifiers); its gradients are non-finite wherever the
reference's are, and over the rest of the rows a NaN or inf touches too (softmax's backward,
which it is made of, normalises over the row). triton runs where it imports, under
``TRITON_INTERPRET=1`` on the CPU (``make test-triton``).
"""

from __future__ import annotations

import functools
import os

import pytest
import torch

from relu_former.relu_attention.kernels import dispatch
from relu_former.relu_attention.kernels.compiled_cpu import compiled_available
from relu_former.relu_attention.kernels.decoding_step import decoding_step
from relu_former.relu_attention.kernels.reference import reference_relu_sums
from relu_former.relu_attention.regularisers import entropy_from_sums

B, H, T, D = 2, 2, 20, 8
BAD_QUERY, BAD_KEY = 6, 7  # the bad key is hidden from queries 0-6 under the causal mask
VALUES = (float("nan"), float("inf"), float("-inf"))


def _masks() -> dict:
    padding = torch.zeros(B, T, dtype=torch.bool)
    padding[1, -4:] = True
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    return {"no mask": {}, "causal": {"attn_mask": causal},
            "padding and causal": {"key_padding_mask": padding, "attn_mask": causal}}


MASKS = _masks()


def _triton():
    interpret = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    try:
        import triton  # noqa: F401
    except ImportError:
        return None
    if not interpret:
        return None  # on CUDA, tests/relu_attention/kernels/test_triton_kernel.py's device
    from relu_former.relu_attention.kernels.triton_kernel import triton_relu_sums

    return triton_relu_sums


def _backends() -> dict:
    """Each backend that runs on this machine's CPU, called through the dispatcher."""
    names = ["reference", "tiled", "flex", "auto"] + (["cpp"] if compiled_available(
        torch.zeros(1)) else [])
    found = {name: functools.partial(dispatch.relu_sums, backend=name) for name in names}
    # tiles of one sequence's 20 queries x 8 keys: U and the gradients add up over tiles
    found[SMALL_TILES] = functools.partial(dispatch.BACKENDS["tiled"], tile_elements=B * H * 64,
                                           key_block=8)
    if _triton() is not None:
        found["triton"] = _triton()
    return found


SMALL_TILES = "tiled, small tiles"
BACKENDS = _backends()
# cpp (and auto on the CPU) computes bfloat16 and float16 in float32
DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
# FlexAttention's eager implementation takes a second a call: its cases are cut to float32
# (the dtype changes nothing in its score modifiers) and the gradients of U, S and T at once;
# it has no dropout
SLOW = {"flex": ((torch.float32,), ((True, 0.0),))}
OPTIONS = ((False, 0.0), (True, 0.0), (True, 0.3))  # (statistics, dropout)


def _mask_cases(name: str) -> dict:
    """The masks a backend is compared with. With small tiles, a tile that padding hides
    entirely (batch 1's last 4 keys) is skipped: its keys' gradients stay exact zeros, where
    the reference's dense products give 0 x NaN = NaN from a NaN query elsewhere; so the
    small tiles are compared without padding (the causal mask hides no whole tile of 20
    queries)."""
    if name == SMALL_TILES:
        return {key: MASKS[key] for key in ("no mask", "causal")}
    return {key: MASKS[key] for key in ("no mask", "padding and causal")}


@pytest.fixture(autouse=True)
def eager_flex_on_cpu(monkeypatch):
    """FlexAttention refuses backward on the CPU at its entry check only; its eager
    implementation runs there (as in test_flex.py)."""
    flex_module = pytest.importorskip("torch.nn.attention.flex_attention")
    if hasattr(flex_module, "_validate_device"):
        monkeypatch.setattr(flex_module, "_validate_device", lambda *args, **kwargs: None)


def _inputs(which: int, value: float, dtype: torch.dtype) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(which)
    qkv = [torch.randn(B, H, T, D, generator=generator, dtype=torch.float64) for _ in range(3)]
    row = BAD_QUERY if which == 0 else BAD_KEY
    qkv[which][1, 0, row, 2] = value
    return [x.to(dtype).requires_grad_() for x in qkv]


def _non_finite(kernel, qkv, masks, with_sums: bool, dropout_p: float = 0.0) -> dict:
    """Where U, S, T, P and the gradients of q, k, v are not finite."""
    sums = kernel(*qkv, need_sums=with_sums, dropout_p=dropout_p, seed=7, **masks)
    generator = torch.Generator().manual_seed(5)
    outputs = [sums.u] + ([sums.row_sum, sums.xlogx] if with_sums else [])
    loss = sum((x * torch.randn(x.shape, generator=generator, dtype=torch.float64)
                .to(x.dtype)).sum() for x in outputs)
    grads = torch.autograd.grad(loss, qkv)
    named = {"U": sums.u, "dq": grads[0], "dk": grads[1], "dv": grads[2]}
    if with_sums:
        named.update(S=sums.row_sum, T=sums.xlogx, P=sums.positives)
    return {name: ~torch.isfinite(x.detach()) for name, x in named.items()}


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("which", [0, 1, 2], ids=["q", "k", "v"])
@pytest.mark.parametrize("name,dtype", [(name, dtype) for name in BACKENDS
                                        for dtype in SLOW.get(name, (DTYPES,))[0]],
                         ids=lambda x: str(x).replace("torch.", ""))
def test_non_finite_inputs_reach_the_same_places_as_in_the_float64_reference(name, dtype,
                                                                              which):
    for value in VALUES:
        for mask_name, masks in _mask_cases(name).items():
            for with_sums, dropout_p in SLOW.get(name, (None, OPTIONS))[1]:
                qkv = _inputs(which, value, dtype)
                exact = [x.detach().double().requires_grad_() for x in qkv]
                want = _non_finite(reference_relu_sums, exact, masks, with_sums, dropout_p)
                got = _non_finite(BACKENDS[name], qkv, masks, with_sums, dropout_p)
                case = (f"{value} in {'qkv'[which]}, {mask_name}, statistics {with_sums}, "
                        f"dropout {dropout_p}")
                assert want["U"].any(), case  # the case is a real one
                for key, where in want.items():
                    if name == "flex" and key.startswith("d"):
                        # softmax's backward spreads a row's NaN over the whole row (its
                        # normaliser is NaN): flex never loses one, but may add some
                        assert torch.equal(got[key] | where, got[key]), f"{key}: {case}"
                    else:
                        assert torch.equal(got[key], where), f"{key}: {case}"


@pytest.mark.parametrize("which", [0, 1, 2], ids=["q", "k", "v"])
def test_a_decoding_step_keeps_nan_and_inf_where_the_reference_does(which):
    for value in VALUES:
        for masks in MASKS.values():
            q, k, v = (x.detach() for x in _inputs(which, value, torch.float32))
            want = reference_relu_sums(q.double(), k.double(), v.double(), need_sums=False,
                                       **masks).u
            got = decoding_step(q, k, v, row_scale=0.5, **masks)
            assert torch.equal(~torch.isfinite(got), ~torch.isfinite(want))


def test_the_entropy_of_a_row_with_a_nan_sum_is_nan():
    row_sum = torch.tensor([0.0, 2.0, float("nan"), float("inf")])
    xlogx = torch.tensor([0.0, 1.0, float("nan"), float("inf")])
    entropy = entropy_from_sums(row_sum, xlogx)
    assert entropy[0] == 0 and torch.isfinite(entropy[1])
    assert torch.isnan(entropy[2]) and not torch.isfinite(entropy[3])
