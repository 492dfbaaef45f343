"""Which ReLU attention backend runs on each device present, and why: ``python -m
relu_former.help --backends``.

For the CPU and each CUDA device: the backend ``auto`` picks (without and with attention
dropout, where they differ) and why, the faster ones it passed over with their causes; then
whether the compiled CPU kernel is built and loads (and with OpenMP), whether Triton imports
and whether it passed its first-use check on each GPU. The checks run here as training runs
them (``first_use_check.py``), at head size 64 in float32; a training checks its own head size
and dtype on first use.
"""

from __future__ import annotations

from typing import List

import torch

from relu_former.relu_attention.kernels.compiled_cpu import compiled_status
from relu_former.relu_attention.kernels.dispatch import BACKENDS, NO_DROPOUT, auto_choice
from relu_former.relu_attention.kernels.first_use_check import first_use_problem
from relu_former.relu_attention.kernels.triton_kernel import triton

HEAD_DIM = 64
DROPOUT = 0.1
# why auto's first choice on a device was taken, when nothing was passed over
FIRST_CHOICE = {"cpp": "the compiled CPU kernel loads", "triton": "passed its first-use check",
                "tiled": "the backend for this device"}


def devices() -> List[torch.device]:
    return [torch.device("cpu")] + [torch.device("cuda", i)
                                    for i in range(torch.cuda.device_count())]


def _named(device: torch.device) -> str:
    return (f"{device} ({torch.cuda.get_device_name(device)})" if device.type == "cuda"
            else str(device))


def _choice(q: torch.Tensor, dropout_p: float) -> str:
    picked, passed_over = auto_choice(q, dropout_p)
    why = "; ".join(problem for _, problem, _ in passed_over) or FIRST_CHOICE.get(picked, "")
    return f"{picked} ({why})"


def backends_report() -> str:
    """The report of the module docstring, one line per fact."""
    lines = [f"ReLU attention backends (torch {torch.__version__}; --attention-backend auto):"]
    for device in devices():
        q = torch.zeros(1, 1, 1, HEAD_DIM, device=device)
        plain, dropped = _choice(q, 0.0), _choice(q, DROPOUT)
        lines.append(f"{_named(device)}: auto picks {plain}" + (
            "" if dropped == plain else f"; with attention dropout {dropped}"))
    lines.append(f"compiled CPU kernel: {compiled_status()}")
    if triton is None:
        lines.append("triton: not importable (torch's CUDA wheels ship it; not needed on "
                     "the CPU)")
    else:
        lines.append(f"triton: imports (version {triton.__version__})")
    for device in devices()[1:]:
        q = torch.zeros(1, 1, 1, HEAD_DIM, device=device)
        for name in ("triton", "flex") if triton is not None else ("flex",):
            problem = first_use_problem(name, BACKENDS[name], q, dropout=name not in NO_DROPOUT)
            lines.append(f"{name} first-use check on {device}: {problem or 'passed'}")
    return "\n".join(lines)
