"""The Triton kernels compile for a CUDA GPU, checked on a machine without one.

The interpreter test (test_triton_kernel.py) runs the kernels' Python in numpy; it does not
run Triton's compiler, which is stricter (static types, constexpr branches, tuple and None
arguments). Here each kernel is compiled to a cubin for sm_80 with Triton's own ``ptxas``
(it comes in the wheel; no driver or device is needed), in the specialisations the wrapper
launches: every mask, dropout and statistic given, or each left out. The PTX also shows what
is compiled out: without the statistics (and without gT in backward) there is no log (the
inlined libdevice log multiplies by ln 2, a constant nothing else uses), and without dropout
no Philox round (its rounds take the high word of a 32-bit product, ``mul.hi.u32``).

Runs where triton is importable (``make test-triton``); the compiler runs in a subprocess
because ``TRITON_INTERPRET=1``, which that target sets, replaces every kernel at import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton", reason="triton is not installed (make test-triton installs it)")

MASKS = ("*u8", "*u8", "i32", "i32", "i32", "i32")
NO_MASKS = (None, None, "i32", "i32", "i32", "i32")
SCALARS = dict(heads="i32", tgt_len="i32", src_len="i32", head_dim="i32", factors_ptr="*fp32",
               dropout_p="fp32", seed="i64")
NO_SUMS = dict(sum_ptr=None, xlogx_ptr=None, pos_ptr=None)
NO_DROPOUT = dict(dropout_p=None)


def forward_case(dtype: str, masks: tuple, **absent) -> dict:
    tensors = dict(q_ptr=dtype, k_ptr=dtype, v_ptr=dtype, u_ptr=dtype, sum_ptr="*fp32",
                   xlogx_ptr="*fp32", pos_ptr="*fp32")
    return dict(kernel="_forward_kernel", types={**tensors, "masks": masks, **SCALARS},
                absent=absent, precision="ieee", is_fp64=dtype == "*fp64")


def backward_case(dtype: str, masks: tuple, wrt: str, **absent) -> dict:
    tensors = dict(q_ptr=dtype, k_ptr=dtype, v_ptr=dtype, gu_ptr=dtype, gt_ptr="*fp32",
                   shift_ptr="*fp32", dq_ptr=dtype, dk_ptr=dtype, dv_ptr=dtype)
    outputs = dict(dq_ptr=None) if wrt == "kv" else dict(dk_ptr=None, dv_ptr=None)
    return dict(kernel="_backward_kernel", types={**tensors, "masks": masks, **SCALARS},
                absent={**outputs, **absent}, precision="ieee", is_fp64=dtype == "*fp64")


# name: (case, whether its PTX takes a log, whether it draws dropout)
CASES = {
    "forward fp16, masks, dropout, statistics": (forward_case("*fp16", MASKS), True, True),
    "forward bf16, nothing optional": (
        forward_case("*bf16", NO_MASKS, **NO_SUMS, **NO_DROPOUT), False, False),
    "forward fp64, statistics": (
        forward_case("*fp64", NO_MASKS, **NO_DROPOUT), True, False),
    "backward dk dv fp16, every gradient": (
        backward_case("*fp16", MASKS, "kv"), True, True),
    "backward dq fp16, every gradient": (backward_case("*fp16", MASKS, "q"), True, True),
    "backward dk dv bf16, gU only": (
        backward_case("*bf16", NO_MASKS, "kv", gt_ptr=None, shift_ptr=None, **NO_DROPOUT),
        False, False),
    # S and T are sums over the undropped scores: without gU the mask is never drawn
    "backward dq fp32 (tf32 dots), gS only, dropout": (
        dict(backward_case("*fp32", MASKS, "q", gu_ptr=None, gt_ptr=None), precision="tf32"),
        False, False),
}
# ln 2 as a PTX float and double literal: the inlined log's constant
LN2 = ("0f3F317218", "0d3FE62E42FEFA39EF")


def compile_case(case: dict) -> str:
    """Compiles one case for sm_80 and returns its PTX (run without TRITON_INTERPRET)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from relu_former.relu_attention.kernels import triton_kernel

    fn = getattr(triton_kernel, case["kernel"])
    constants = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_D=64, DOT_PRECISION=case["precision"],
                     IS_FP64=case["is_fp64"], **case["absent"])
    signature, constexprs = {}, {}
    for index, name in enumerate(fn.arg_names):
        if name in constants:
            signature[name], constexprs[(index,)] = "constexpr", constants[name]
        elif isinstance(case["types"][name], (list, tuple)):
            parts = case["types"][name]
            signature[name] = tuple("constexpr" if p is None else p for p in parts)
            constexprs.update({(index, i): None for i, p in enumerate(parts) if p is None})
        else:
            signature[name] = case["types"][name]
    compiled = triton.compile(ASTSource(fn, signature, constexprs),
                              target=GPUTarget("cuda", 80, 32))
    assert compiled.asm["cubin"], "ptxas produced no cubin"
    return compiled.asm["ptx"]


@pytest.mark.parametrize("name", list(CASES))
def test_kernel_compiles_for_sm80_and_compiles_out_what_is_absent(name, tmp_path):
    case, takes_log, draws_dropout = CASES[name]
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env.update(TRITON_CACHE_DIR=str(tmp_path / "cache"), TRITON_DEFAULT_FP_FUSION="1")
    done = subprocess.run([sys.executable, __file__, json.dumps(case)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    ptx = done.stdout
    assert ".entry " + case["kernel"] in ptx
    assert any(literal in ptx.upper() for literal in (c.upper() for c in LN2)) == takes_log
    assert ("mul.hi.u32" in ptx) == draws_dropout


if __name__ == "__main__":
    sys.stdout.write(compile_case(json.loads(sys.argv[1])))
