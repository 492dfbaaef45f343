"""One ``backend`` choice for ReLU attention's sums: a table of backends, each one function.

Every backend has the same contract (``relu_former.relu_attention.kernels.common``):

    backend(q, k, v, *, key_padding_mask=None, attn_mask=None, dropout_p=0.0, seed=None,
            need_sums=True, **options) -> ReLUSums(u, row_sum, xlogx, positives, scores)

with q, k, v of shape (B, H, T, D). The names:

    reference  dense, or over blocks of ``key_chunk_size`` keys; dense returns s with gradient
    tiled      tiles of queries x keys in torch operations, never Tq x Tk (any device)
    cpp        the same tiles as compiled C++ (CPU, float32/float64; built at install)
    flex       FlexAttention (CUDA, compiled; no dropout)
    triton     the Triton kernel (CUDA with the triton package; its interpreter on the CPU)
    auto       triton on CUDA where triton imports, else flex on CUDA without dropout where
               FlexAttention exists; on the CPU cpp where it is built, else tiled

A decoding step (at most 16 queries a head, no gradient, dropout, weights or statistics) is
not a backend's: ``relu_attention`` computes it in two dense products whatever the backend
(``decoding_step.py``), which is faster there than any tiled kernel's set-up.

Adding a backend is one entry of ``BACKENDS`` (a module with an optional dependency, as the
Triton kernel, imports it inside its functions, so that the table itself imports with torch
alone). ``key_chunk_size`` is read by the backends of ``CHUNKED_BACKENDS`` only: giving it to
another is an error rather than a setting that silently does nothing.

A module binds its backend once (``BoundBackend``): the name and chunk size are checked when it
is built, and ``auto`` is resolved the first time it sees a device (and whether dropout is on),
so a forward pass looks the kernel up in a small dict instead of re-checking strings.
"""

from __future__ import annotations

import functools
from typing import Callable, Dict

from torch import Tensor

from relu_former.relu_attention.kernels.common import ReLUSums
from relu_former.relu_attention.kernels.compiled_cpu import compiled_available, compiled_relu_sums
from relu_former.relu_attention.kernels.flex import flex_available, flex_relu_sums
from relu_former.relu_attention.kernels.reference import reference_relu_sums
from relu_former.relu_attention.kernels.tiled import tiled_relu_sums
from relu_former.relu_attention.kernels.triton_kernel import triton_available, triton_relu_sums

Backend = Callable[..., ReLUSums]


BACKENDS: Dict[str, Backend] = {
    "reference": reference_relu_sums,
    "tiled": tiled_relu_sums,
    "cpp": compiled_relu_sums,
    "flex": flex_relu_sums,
    "triton": triton_relu_sums,
}
AUTO = "auto"
BACKEND_NAMES = (AUTO, *BACKENDS)
# The backends that read ``key_chunk_size`` (the others would ignore it).
CHUNKED_BACKENDS = ("reference",)


def check_backend(backend: str, key_chunk_size: int = 0) -> None:
    """ValueError for an unknown backend or a key chunk size the backend would ignore."""
    names = (AUTO, *BACKENDS)  # read now: a backend entered after import counts
    if backend not in names:
        raise ValueError(f"backend {backend!r} is unknown; choose one of {', '.join(names)}")
    if key_chunk_size and backend not in CHUNKED_BACKENDS:
        raise ValueError(f"a key chunk size ({key_chunk_size}) is read only by the "
                         f"{', '.join(CHUNKED_BACKENDS)} backend; backend {backend!r} "
                         "ignores it: drop it or choose the reference backend")


def resolve_backend(backend: str, q: Tensor, dropout_p: float = 0.0) -> str:
    """The concrete backend ``auto`` stands for on this input; a forced backend that cannot
    run here is a ValueError naming the fix."""
    if backend == AUTO:
        if q.device.type == "cuda" and triton_available(q):
            return "triton"
        if dropout_p == 0 and flex_available(q):
            return "flex"
        return "cpp" if compiled_available(q) else "tiled"
    if backend == "triton" and not triton_available(q):
        raise ValueError("the triton backend needs a CUDA tensor and the triton package "
                         f"(got a {q.device.type} tensor); choose auto or tiled")
    if backend == "cpp" and not compiled_available(q):
        raise ValueError("the cpp backend needs a CPU tensor and the compiled extension "
                         "(pip install --no-build-isolation -e .); choose auto or tiled")
    if backend == "flex" and dropout_p:
        raise ValueError("the flex backend has no attention dropout; choose auto, triton or "
                         "tiled, or set the attention dropout to 0")
    return backend


class BoundBackend:
    """A checked backend choice; ``kernel(q, dropout_p)`` is the function to call on this input.

    ``auto`` is resolved once per (device type, dropout on) and kept; a forced backend is
    checked against the first input of each kind the same way.
    """

    def __init__(self, backend: str = AUTO, key_chunk_size: int = 0):
        check_backend(backend, key_chunk_size)
        self.backend = backend
        self.key_chunk_size = key_chunk_size
        self._kernels: Dict[tuple, Backend] = {}

    def kernel(self, q: Tensor, dropout_p: float) -> Backend:
        key = (q.device.type, dropout_p > 0)
        found = self._kernels.get(key)
        if found is None:
            name = resolve_backend(self.backend, q, dropout_p)
            found = BACKENDS[name]
            if name in CHUNKED_BACKENDS:
                found = functools.partial(found, key_chunk_size=self.key_chunk_size)
            self._kernels[key] = found
        return found

    def __getstate__(self) -> dict:
        # a resolved kernel belongs to this process's devices and imports, not to a copy
        return {**self.__dict__, "_kernels": {}}


def relu_sums(q: Tensor, k: Tensor, v: Tensor, *, backend: str = AUTO,
              key_chunk_size: int = 0, key_padding_mask: Tensor | None = None,
              attn_mask: Tensor | None = None, dropout_p: float = 0.0,
              seed: int | None = None, need_sums: bool = True) -> ReLUSums:
    """U, S, T, P (and s for the dense reference) from the chosen backend.

    ``need_sums=False``: only U (S, T, P None), the cost of plain attention.
    """
    kernel = BoundBackend(backend, key_chunk_size).kernel(q, dropout_p)
    return kernel(q, k, v, key_padding_mask=key_padding_mask, attn_mask=attn_mask,
                  dropout_p=dropout_p, seed=seed, need_sums=need_sums)
