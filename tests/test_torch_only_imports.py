"""The kernels are pure torch: importing one must not import fairseq or register anything."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers import REPO_ROOT

# Every torch-only module of each paper's folder: the kernels and the pure maths.
KERNEL_FILES = [
    *(REPO_ROOT / "relu_former" / "relu_attention" / "kernels").glob("*.py"),
    REPO_ROOT / "relu_former" / "relu_attention" / "activations.py",
    REPO_ROOT / "relu_former" / "relu_attention" / "config.py",
    REPO_ROOT / "relu_former" / "relu_attention" / "regularisers.py",
    REPO_ROOT / "relu_former" / "relu_attention" / "statistics.py",
    REPO_ROOT / "relu_former" / "sparse_softmax" / "sparse_softmax.py",
    REPO_ROOT / "relu_former" / "pyramidion" / "successive_halving.py",
]
KERNELS = sorted(".".join(p.relative_to(REPO_ROOT).with_suffix("").parts)
                 for p in KERNEL_FILES if p.stem != "__init__")


@pytest.mark.parametrize("name", KERNELS)
def test_kernel_imports_without_fairseq(name):
    code = (f"import {name}, sys; "
            "assert 'fairseq' not in sys.modules, sorted(m for m in sys.modules if 'fairseq' in m)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr

