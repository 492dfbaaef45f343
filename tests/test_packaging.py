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


def _install_plan() -> list[str]:
    """The shell lines ``make install`` would run on a fresh venv, continuation lines joined."""
    plan = run_command(["make", "-n", "-B", "install", "VENV=/nonexistent/venv"],
                       cwd=REPO_ROOT).stdout
    return plan.replace("\\\n", " ").splitlines()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_install_passes_the_torch_pin_to_every_pip_call_and_fairseq_without_deps():
    installs = [line for line in _install_plan() if "pip install" in line]
    assert len(installs) == 4, installs
    for line in installs:
        for command in line.split(";"):
            assert "pip install" not in command or "-c constraints.txt" in command, command
    # fairseq's metadata requires torchaudio, which would pull a second torch
    fairseq = [line for line in installs if "fairseq" in line]
    assert len(fairseq) == 1 and "--no-deps" in fairseq[0], fairseq


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_install_builds_the_documented_fairseq_and_checks_it_by_name():
    """fairseq-fixed, as docs/install.md says; ve-fairseq's wheels were tried and not taken.
    The step is skipped only when that distribution and version is installed: any other
    fairseq would pass a bare ``import fairseq``."""
    pins = set(re.findall(r"\b[\w-]*fairseq[\w-]*==[\d.]+", " ".join(_install_plan())))
    assert pins == {"fairseq-fixed==0.12.3.1"}, pins
    documented = (REPO_ROOT / "docs" / "install.md").read_text()
    assert "--no-deps --no-build-isolation fairseq-fixed==0.12.3.1" in documented
    fairseq_line = next(line for line in _install_plan() if "fairseq-fixed==" in line)
    assert "v('fairseq-fixed') == '0.12.3.1'" in fairseq_line
    assert 'import fairseq"' not in fairseq_line


def test_one_torch_at_the_pinned_version_and_one_fairseq_are_installed():
    """A second torch (pulled by fairseq's torchaudio requirement, say) replaces the pinned
    build; a second fairseq distribution installed over the first leaves their files mixed."""
    import importlib.metadata as metadata

    if not hasattr(metadata, "packages_distributions"):
        pytest.skip("needs Python 3.10's importlib.metadata.packages_distributions")
    providers = metadata.packages_distributions()
    assert len(set(providers["torch"])) == 1, providers["torch"]
    assert len(set(providers["fairseq"])) == 1, providers["fairseq"]
    pin = re.search(r"^torch==([\w.]+)", (REPO_ROOT / "constraints.txt").read_text(), re.M)
    assert metadata.version("torch").split("+")[0] == pin.group(1)
