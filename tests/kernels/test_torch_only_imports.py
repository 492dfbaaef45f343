"""The kernels are pure torch: importing one must not import fairseq or register anything."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers import REPO_ROOT

KERNELS = sorted(p.stem for p in (REPO_ROOT / "relu_former" / "kernels").glob("*.py")
                 if p.stem != "__init__")


@pytest.mark.parametrize("name", KERNELS)
def test_kernel_imports_without_fairseq(name):
    code = (f"import relu_former.kernels.{name}, sys; "
            "assert 'fairseq' not in sys.modules, sorted(m for m in sys.modules if 'fairseq' in m)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr


def test_the_issue_command_passes():
    code = "import relu_former.kernels.relu_attention, sys; assert 'fairseq' not in sys.modules"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
