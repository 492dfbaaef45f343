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
    auto       the first backend of ``AUTO_ORDER`` that runs here: on CUDA triton, then flex
               (no dropout), then tiled; on the CPU cpp where the compiled kernel loads,
               else tiled; tiled on any other device

On CUDA, triton and flex are compiled for the GPU they meet, so before ``auto`` first takes
one on a device it runs the first-use check (``first_use_check.py``: a small input against the
float64 sums, forward and backward, with and without dropout's replay). A backend that fails
it, or a compiled CPU kernel that is missing, is passed over for the next one, with one
warning a process naming the backend, the device, the cause and what to do. A forced backend
is never replaced: one that cannot run here, or fails its check, is an error.
``python -m relu_former.help --backends`` prints auto's choice on each device present.

A decoding step (at most 16 queries a head, no gradient, dropout, weights or statistics) is
not a backend's: ``relu_attention`` computes it in two dense products whatever the backend
(``decoding_step.py``), which is faster there than any tiled kernel's set-up.

Adding a backend is one entry of ``BACKENDS`` (a module with an optional dependency, as the
Triton kernel, imports it inside its functions, so that the table itself imports with torch
alone). ``key_chunk_size`` is read by the backends of ``CHUNKED_BACKENDS`` only: giving it to
another is an error rather than a setting that silently does nothing.

A module binds its backend once (``BoundBackend``): the name and chunk size are checked when it
is built, the one check they get, and the backend is resolved the first time it sees a device,
dtype and dropout on or off, so a forward pass looks the kernel up in a small dict.
"""

from __future__ import annotations

import functools
import logging
from typing import Callable, Dict, List, Tuple

from torch import Tensor

from relu_former.errors import OptionError
from relu_former.relu_attention.kernels.common import ReLUSums
from relu_former.relu_attention.kernels.compiled_cpu import (
    REBUILD,
    compiled_available,
    compiled_problem,
    compiled_relu_sums,
)
from relu_former.relu_attention.kernels.first_use_check import first_use_problem
from relu_former.relu_attention.kernels.flex import flex_available, flex_relu_sums
from relu_former.relu_attention.kernels.reference import reference_relu_sums
from relu_former.relu_attention.kernels.tiled import tiled_relu_sums
from relu_former.relu_attention.kernels.triton_kernel import triton_available, triton_relu_sums

logger = logging.getLogger(__name__)

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
# The backends without attention dropout.
NO_DROPOUT = ("flex",)
# auto's candidates per (device type, dropout on), fastest first; tiled runs everywhere.
AUTO_ORDER: Dict[Tuple[str, bool], Tuple[str, ...]] = {
    ("cuda", False): ("triton", "flex", "tiled"),
    ("cuda", True): ("triton", "tiled"),
    ("cpu", False): ("cpp", "tiled"),
    ("cpu", True): ("cpp", "tiled"),
}
# The backends compiled for the device they run on, per device type: checked on first use.
FIRST_USE_CHECKED: Dict[str, Tuple[str, ...]] = {"cuda": ("triton", "flex")}
REPORT = ("Please report it to the relu-former maintainers with this warning and the output "
          "of `python -m relu_former.help --backends`; --attention-backend names a backend "
          "to run instead")
# What to do about a fast backend that is missing (a failed check is reported: REPORT).
ADVICE = {"cpp": f"Rebuild it from the repository: `{REBUILD}` (docs/install.md).",
          "triton": "torch's CUDA wheels ship triton; pip install triton.",
          "flex": "FlexAttention comes with torch >= 2.5."}


def _triton_missing(q: Tensor) -> str:
    if triton_available(q):
        return ""
    return ("triton not importable" if q.device.type == "cuda" else
            f"triton needs a CUDA tensor (got {q.device.type}; TRITON_INTERPRET=1 runs it on "
            "the CPU)")


def _flex_missing(q: Tensor) -> str:
    # off CUDA FlexAttention runs eager (the tests' path), and says itself if it is missing
    if q.device.type != "cuda" or flex_available(q):
        return ""
    return "FlexAttention missing (torch >= 2.5 has it)"


def _compiled_missing(q: Tensor) -> str:
    if compiled_available(q):
        return ""
    problem = compiled_problem()
    return f"compiled kernel not loaded: {problem}" if problem else "cpp needs a CPU tensor"


# Why a backend cannot run on q ('' = it can); a backend not listed runs everywhere.
MISSING: Dict[str, Callable[[Tensor], str]] = {
    "triton": _triton_missing, "flex": _flex_missing, "cpp": _compiled_missing}

# (backend, device) pairs auto passed over and warned about: once a process each
_warned: set = set()


def check_backend(backend: str, key_chunk_size: int = 0) -> None:
    """OptionError naming the flag for an unknown backend or a key chunk size that is not an
    integer >= 0 or that the backend would ignore."""
    names = (AUTO, *BACKENDS)  # read now: a backend entered after import counts
    if backend not in names:
        raise OptionError("--attention-backend", f"backend {backend!r} is unknown; choose one "
                          f"of {', '.join(names)}")
    flag = "--attention-key-chunk-size"
    if key_chunk_size is None or int(key_chunk_size) != key_chunk_size or key_chunk_size < 0:
        raise OptionError(flag, f"{flag} must be an integer >= 0 (0 = dense attention), got "
                          f"{key_chunk_size}")
    if key_chunk_size and backend not in CHUNKED_BACKENDS:
        raise OptionError(flag, f"a key chunk size ({key_chunk_size}) is read only by the "
                          f"{', '.join(CHUNKED_BACKENDS)} backend; backend {backend!r} "
                          "ignores it: drop it or choose the reference backend")


def _missing(name: str, q: Tensor, dropout_p: float) -> str:
    """'' if backend ``name`` can run on q with dropout_p, else why not."""
    if dropout_p and name in NO_DROPOUT:
        return f"{name} has no attention dropout"
    return MISSING.get(name, lambda q: "")(q)


def _failed_check(name: str, q: Tensor) -> str:
    """'' if backend ``name`` needs no first-use check on q's device or passed it."""
    if name not in FIRST_USE_CHECKED.get(q.device.type, ()):
        return ""
    failed = first_use_problem(name, BACKENDS[name], q, dropout=name not in NO_DROPOUT)
    return f"{name} failed its first-use check: {failed}" if failed else ""


def auto_choice(q: Tensor, dropout_p: float = 0.0) -> Tuple[str, List[Tuple[str, str, str]]]:
    """The backend ``auto`` takes for q (and dropout on or off), and the faster ones it
    passed over as (name, why, what to do); runs the first-use checks it needs."""
    passed_over = []
    for name in AUTO_ORDER.get((q.device.type, dropout_p > 0), ("tiled",)):
        missing = _missing(name, q, dropout_p)
        failed = "" if missing else _failed_check(name, q)
        if not (missing or failed):
            return name, passed_over
        passed_over.append((name, missing or failed, REPORT if failed else ADVICE.get(name, "")))
    return "tiled", passed_over


def resolve_backend(backend: str, q: Tensor, dropout_p: float = 0.0) -> str:
    """The concrete backend ``backend`` stands for on this input. auto passes over what
    cannot run or failed its check, and warns once a process for each; a forced backend
    that cannot run here is a ValueError naming the fix, one that fails its check an error."""
    if backend == AUTO:
        name, passed_over = auto_choice(q, dropout_p)
        for skipped, problem, advice in passed_over:
            if (skipped, str(q.device)) not in _warned:
                _warned.add((skipped, str(q.device)))
                logger.warning("ReLU attention on %s: %s; running the %s backend instead. %s",
                               q.device, problem, name, advice)
        return name
    missing = _missing(backend, q, dropout_p)
    if missing:
        raise ValueError(f"the {backend} backend cannot run here: {missing}; choose auto or "
                         "tiled")
    failed = _failed_check(backend, q)
    if failed:
        raise RuntimeError(f"ReLU attention on {q.device}: {failed}. {REPORT}")
    return backend


class BoundBackend:
    """A checked backend choice; ``kernel(q, dropout_p)`` is the function to call on this input.

    The name and chunk size are checked here, once; the backend is resolved once per
    (device, dtype, dropout on) and kept.
    """

    def __init__(self, backend: str = AUTO, key_chunk_size: int = 0):
        check_backend(backend, key_chunk_size)
        self.backend = backend
        self.key_chunk_size = key_chunk_size
        self._kernels: Dict[tuple, Backend] = {}

    def kernel(self, q: Tensor, dropout_p: float) -> Backend:
        key = (q.device, q.dtype, dropout_p > 0)
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
