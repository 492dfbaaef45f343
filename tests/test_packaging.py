"""Packaging: one torch pin, runtime and development requirements apart, declared runtime
dependencies that cannot pull a second torch, and a linter that installs alone."""

from __future__ import annotations

import ast
import re
import shutil

import pytest

from helpers import REPO_ROOT, run_command

BUILD_FILES = ["Makefile", "setup.py", "requirements.txt", "requirements-dev.txt",
               "constraints.txt", "pyproject.toml", ".ci/run"]


def _requirement_names(path: str) -> list[str]:
    lines = (REPO_ROOT / path).read_text().splitlines()
    return [re.split(r"[=<>~\[ ;]", line.strip())[0].lower() for line in lines
            if line.strip() and not line.lstrip().startswith(("#", "-"))]


def _setup_keyword(name: str):
    tree = ast.parse((REPO_ROOT / "setup.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == name:
            return ast.literal_eval(node.value)
    raise AssertionError(f"setup() has no {name}=")


def test_torch_is_pinned_in_constraints_only():
    pins = {path: re.findall(r"torch\s*==\s*[\d.]+", (REPO_ROOT / path).read_text())
            for path in BUILD_FILES}
    assert len(pins.pop("constraints.txt")) == 1
    assert not any(pins.values()), pins


def test_runtime_and_development_requirements_are_apart():
    runtime, dev = _requirement_names("requirements.txt"), _requirement_names(
        "requirements-dev.txt")
    assert {"pytest", "ruff"} <= set(dev)
    assert not {"pytest", "ruff"} & set(runtime)
    assert "tensorboardx" in runtime
    assert "torch" not in runtime + dev  # pinned by constraints.txt only


def test_setup_declares_runtime_dependencies_without_fairseq_or_a_torch_pin():
    requires = _setup_keyword("install_requires")
    names = [re.split(r"[=<>~\[ ;]", r)[0].lower() for r in requires]
    assert {"torch", "numpy", "omegaconf"} <= set(names)
    assert not any(name.startswith("fairseq") for name in names)
    assert not any("==" in r for r in requires if r.startswith("torch"))


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_lint_installs_ruff_alone():
    plan = run_command(["make", "-n", "-B", "lint", "VENV=/nonexistent/venv"],
                       cwd=REPO_ROOT).stdout
    assert "ruff check ." in plan
    installs = [line for line in plan.splitlines() if "pip install" in line]
    assert installs and all("ruff" in line for line in installs), plan
    assert "fairseq" not in plan and "torch" not in plan.replace("constraints.txt", "")
    assert ".installed" not in plan


def test_suite_warning_filters_hide_only_named_third_party_noise(pytestconfig):
    """The plugin's own UserWarning and DeprecationWarning reach the test summary."""
    import warnings

    from _pytest.config import parse_warning_filter

    entries = pytestconfig.getini("filterwarnings")
    assert entries
    with warnings.catch_warnings(record=True) as seen:
        warnings.resetwarnings()
        warnings.simplefilter("always")
        for entry in entries:
            action, message, *_ = parse_warning_filter(entry, escape=False)
            assert action != "ignore" or message, f"a filter hides a whole category: {entry}"
            warnings.filterwarnings(*parse_warning_filter(entry, escape=False))
        for message, category in [
            ("relu_former: a warning of the plugin", UserWarning),
            ("relu_former: a deprecated flag", DeprecationWarning),
            ("`torch.jit.script` is deprecated. Please switch to torch.compile",
             DeprecationWarning),
            ("\n'config' is validated against ConfigStore schema with the same name.",
             UserWarning),
        ]:
            warnings.warn(message, category, stacklevel=1)
    assert [str(w.message) for w in seen] == ["relu_former: a warning of the plugin",
                                             "relu_former: a deprecated flag"]
