"""The CPU a figure was computed on. The same seed and code do not give the same floats on
every machine: torch picks its CPU kernels by the instruction sets it finds
(``torch.backends.cpu.get_cpu_capability()``), as do the BLAS and oneDNN under it. Table 4's
seed 1 read 7.119 bits at its first validation with AVX512 kernels, 7.121 with
``ATEN_CPU_CAPABILITY=avx2`` on the same machine, 7.122 on an earlier session's machine.
"""

from __future__ import annotations

import contextlib
import platform


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (else what ``platform`` knows)."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_path() -> str:
    """The CPU model and torch's kernels' instruction set: ``Intel(R) ..., torch AVX512``."""
    import torch  # here: a record is written where torch is loaded anyway

    return f"{cpu_model()}, torch {torch.backends.cpu.get_cpu_capability()}"
