"""Without the compiled CPU kernel (not built, or failing to load) ReLU attention runs the
tiled backend and says once why and how to rebuild; an install without a compiler works."""

import importlib
import json
import logging
import os
import sys

import pytest
import torch

from relu_former.relu_attention.activations import bind_attention
from relu_former.relu_attention.kernels import compiled_cpu, dispatch

from helpers import (
    TINY_MODEL_ARGS,
    TINY_TRAIN_ARGS,
    FairseqRun,
    fairseq_command,
    run_command,
)

REBUILD = "pip install --no-build-isolation --no-deps -e ."


@pytest.fixture(autouse=True)
def fresh_process_state(monkeypatch, tmp_path):
    """The extension loaded anew (and again after the test), no build note, nothing warned."""
    compiled_cpu._loaded.cache_clear()
    monkeypatch.setattr(compiled_cpu, "BUILD_NOTE", tmp_path / "note.json")
    monkeypatch.setattr(dispatch, "_warned", set())
    yield
    compiled_cpu._loaded.cache_clear()


def unimportable(monkeypatch):
    monkeypatch.setitem(sys.modules, compiled_cpu.EXTENSION, None)


def failing_to_load(monkeypatch, message):
    real = importlib.import_module

    def import_module(name, *args):
        if name == compiled_cpu.EXTENSION:
            raise ImportError(message)
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", import_module)


def write_note(**note):
    compiled_cpu.BUILD_NOTE.write_text(json.dumps(note))


def train_twice(caplog):
    """Two models' forward and backward on the CPU under auto; the warnings logged."""
    q, k, v = (torch.randn(1, 2, 5, 8, requires_grad=True) for _ in range(3))
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            bind_attention("relu")(q, k, v, dropout_p=0.1).out.sum().backward()
    assert torch.isfinite(q.grad).all()
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_missing_extension_runs_tiled_and_warns_once_with_the_cause(monkeypatch, caplog):
    unimportable(monkeypatch)
    write_note(built=False, why="no working C++ compiler ('false' failed on a test program)",
               torch=torch.__version__)
    q = torch.zeros(1, 1, 2, 4)
    assert dispatch.resolve_backend("auto", q) == "tiled"
    caplog.clear()
    monkeypatch.setattr(dispatch, "_warned", set())
    warnings = train_twice(caplog)
    assert len(warnings) == 1, warnings
    assert ("ReLU attention on cpu: compiled kernel not loaded: not built: no working C++ "
            "compiler ('false' failed on a test program); running the tiled backend instead"
            ) in warnings[0] and REBUILD in warnings[0]


def test_without_a_note_the_cause_is_still_named(monkeypatch):
    unimportable(monkeypatch)
    assert compiled_cpu.compiled_problem().startswith("not built (")
    with pytest.raises(ValueError, match=f"compiled kernel, which is not built .*{REBUILD}"):
        compiled_cpu.compiled_relu_sums(*(torch.zeros(1, 1, 2, 4),) * 3)


def test_an_extension_failing_to_load_names_the_torch_it_was_built_for(monkeypatch, caplog):
    failing_to_load(monkeypatch, "_relu_attention_cpu.so: undefined symbol: _ZN3c104impl3cow")
    write_note(built=True, why="", torch="2.4.0+cpu")
    problem = compiled_cpu.compiled_problem()
    assert problem == ("fails to load (_relu_attention_cpu.so: undefined symbol: "
                       f"_ZN3c104impl3cow): built for torch 2.4.0+cpu, this is "
                       f"{torch.__version__}")
    warnings = train_twice(caplog)
    assert len(warnings) == 1 and problem in warnings[0] and REBUILD in warnings[0], warnings


def test_a_serial_build_says_so_once(monkeypatch, caplog):
    if compiled_cpu.compiled_problem():
        pytest.skip("needs the compiled kernel")  # test_compiled_cpu fails where required
    compiled_cpu._loaded.cache_clear()
    write_note(built=True, why="built without OpenMP ('clang++' has no OpenMP (-fopenmp failed "
               "on a test program)): it runs on one thread", torch=torch.__version__)
    warnings = train_twice(caplog)
    assert len(warnings) == 1 and "runs on one thread" in warnings[0], warnings
    assert "compiler that has OpenMP" in warnings[0] and REBUILD in warnings[0]
    assert compiled_cpu.compiled_status() == ("loads; built without OpenMP ('clang++' has no "
                                              "OpenMP (-fopenmp failed on a test program)): it "
                                              "runs on one thread")


@pytest.mark.slow
def test_an_install_without_a_compiler_trains_and_says_why(tmp_path, toy_data_bin,
                                                          installed_without_compiler):
    """pip install with CC=false CXX=false succeeds; the plugin installed there trains a
    relu_former model on the CPU, with one warning naming the cause and the rebuild command,
    and the backends report says the same."""
    target = installed_without_compiler
    note = json.loads((target / "relu_former/relu_attention/kernels/"
                       "_relu_attention_cpu_build.json").read_text())
    assert note["built"] is False and "no working C++ compiler" in note["why"]
    installed = {"PYTHONPATH": str(target)}  # the checkout is not on the path
    run = FairseqRun(data_bin=toy_data_bin, work=tmp_path / "work",
                     user_dir=str(target / "relu_former"))
    run.work.mkdir()
    proc = run_command([*train_command(run), "--arch", "relu_former_iwslt_de_en"],
                       cwd=run.work, env=installed, fresh=True)
    log = proc.stdout + proc.stderr
    assert log.count("compiled kernel not loaded") == 1, log[-3000:]
    assert "not built: no working C++ compiler" in log and REBUILD in log
    assert str(target) in run_command(
        [sys.executable, "-c", "import relu_former; print(relu_former.__file__)"],
        cwd=run.work, env=installed, fresh=True).stdout
    report = run_command([sys.executable, "-m", "relu_former.help", "--backends"],
                         cwd=run.work, env=installed, fresh=True).stdout
    assert "cpu: auto picks tiled (compiled kernel not loaded: not built: no working C++" \
        in report, report


def train_command(run: FairseqRun) -> list:
    return [fairseq_command("fairseq-train"), str(run.data_bin), "--user-dir", run.user_dir,
            "--save-dir", str(run.work / "checkpoints"), *TINY_TRAIN_ARGS, *TINY_MODEL_ARGS]


def test_ci_requires_the_compiled_kernel():
    """Where RELU_FORMER_REQUIRE_COMPILED=1 (CI, make test) a missing kernel fails."""
    if os.environ.get("RELU_FORMER_REQUIRE_COMPILED") != "1":
        pytest.skip("RELU_FORMER_REQUIRE_COMPILED is not set")
    assert compiled_cpu.compiled_problem() == "", compiled_cpu.compiled_problem()


def test_the_backends_report_names_the_cause(monkeypatch, capsys):
    from relu_former.help import main

    unimportable(monkeypatch)
    write_note(built=False, why="torch was not importable when the package was built",
               torch=None)
    main(["--backends"])
    report = capsys.readouterr().out
    assert ("cpu: auto picks tiled (compiled kernel not loaded: not built: torch was not "
            "importable when the package was built)") in report
    assert "compiled CPU kernel: not loaded: not built: torch was not importable" in report
    assert "triton: " in report


def test_the_backends_report_of_a_loaded_kernel(capsys):
    from relu_former.help import main

    if compiled_cpu.compiled_problem():
        pytest.skip("needs the compiled kernel")  # test_compiled_cpu fails where required
    compiled_cpu._loaded.cache_clear()
    write_note(built=True, why="", torch=torch.__version__)
    main(["--backends"])
    report = capsys.readouterr().out
    assert "cpu: auto picks cpp (the compiled CPU kernel loads)" in report
    assert "compiled CPU kernel: loads, built with OpenMP" in report
