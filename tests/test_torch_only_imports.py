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
# each module in turn, in one interpreter, until one fails (it names those that passed): a
# module imported after torch-only ones sees no fairseq they brought in
IMPORT_EACH = """
import importlib, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
    assert 'fairseq' not in sys.modules, sorted(m for m in sys.modules if 'fairseq' in m)
    print(name, flush=True)
"""


@pytest.fixture(scope="module")
def import_failures() -> dict:
    """Each kernel that imports fairseq or fails to import, with its interpreter's stderr: one
    interpreter for all that pass (16 of torch's imports were most of this file's time), a
    new one for those after a failure."""
    failures, left = {}, KERNELS
    while left:
        proc = subprocess.run([sys.executable, "-c", IMPORT_EACH, *left], cwd=REPO_ROOT,
                              capture_output=True, text=True)
        left = left[len(proc.stdout.split()):]
        if proc.returncode == 0:
            assert not left, proc.stdout
            break
        assert left, proc.stderr  # the interpreter failed after the last import
        failures[left[0]] = proc.stderr
        left = left[1:]
    return failures


@pytest.mark.parametrize("name", KERNELS)
def test_kernel_imports_without_fairseq(name, import_failures):
    assert name not in import_failures, import_failures[name]
