"""Shared fixtures: the toy corpus, binarized once, and a CLI driver on it; a
folder made once for the whole run; the order the suite runs in; and, on request, each test's
CPU time.

Helpers the tests import live in ``tests/helpers.py``; this file defines fixtures and two hooks
(the order, the CPU time).
"""

from __future__ import annotations

import os
import resource
import shutil
from pathlib import Path
from typing import Callable

import pytest
from filelock import FileLock

from helpers import FairseqRun, install_without_compiler, preprocess, write_toy_parallel_corpus


def pytest_collection_modifyitems(items) -> None:
    """The end-to-end tests first, the scripts' (the longest) before the others: with two
    workers the short unit tests then fill the gaps at the end instead of one long test
    running alone while the other worker idles."""
    def rank(item) -> int:
        if item.get_closest_marker("slow") is None:
            return 2
        return 0 if item.nodeid.startswith("tests/scripts/") else 1
    items.sort(key=rank)  # stable: file order within each rank


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With ``PYTEST_CPU_LOG=FILE``, each test's CPU seconds (user + sys, of the test process
    and its waited-for children, setup and teardown included) are appended to FILE, one
    ``seconds<TAB>nodeid`` line each: the measure of where the suite's time goes on a machine
    too busy for wall times. Unset, nothing is measured."""
    log = os.environ.get("PYTEST_CPU_LOG")
    if not log:
        yield
        return

    def cpu() -> float:
        own, children = (resource.getrusage(who) for who in
                         (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    start = cpu()
    yield
    with open(log, "a") as out:
        out.write(f"{cpu() - start:.2f}\t{item.nodeid}\n")


@pytest.fixture(scope="session")
def made_once(tmp_path_factory) -> Callable[[str, Callable[[Path], object]], Path]:
    """``made_once(name, make)``: a folder that ``make(folder)`` filled, made once for the
    whole run. A session fixture alone runs once per pytest-xdist worker; this one is made by
    the first worker that asks, under a lock, and the others wait and read it. Tests must not
    change it: they copy what they modify."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's folder, which holds each worker's own
    shared = root / "made_once"
    shared.mkdir(exist_ok=True)

    def made(name: str, make: Callable[[Path], object]) -> Path:
        folder, done = shared / name, shared / f"{name}.done"
        with FileLock(str(shared / f"{name}.lock")):
            if not done.exists():
                if folder.exists():  # left by a worker whose make failed: start afresh
                    shutil.rmtree(folder)
                folder.mkdir()
                make(folder)
                done.touch()
        return folder

    return made


@pytest.fixture(scope="session")
def installed_without_compiler(made_once) -> Path:
    """The plugin installed non-editable without a compiler (``install_without_compiler``),
    made once: the folder to put on ``sys.path`` (read only)."""
    return made_once("installed_without_compiler", install_without_compiler) / "site"


@pytest.fixture(scope="session")
def toy_raw_corpus(made_once) -> Path:
    """Raw text of the toy translation task (shared by the whole run; do not modify)."""
    return made_once("toy_raw", write_toy_parallel_corpus)


@pytest.fixture(scope="session")
def toy_data_bin(toy_raw_corpus, made_once) -> Path:
    """The toy corpus binarized by ``fairseq-preprocess`` (shared; do not modify)."""
    return made_once("toy_bin", lambda folder: preprocess(toy_raw_corpus, folder))


@pytest.fixture
def fairseq_run(toy_data_bin, tmp_path) -> FairseqRun:
    """A fresh work folder driving the fairseq CLI on the toy binarized corpus."""
    return FairseqRun(data_bin=toy_data_bin, work=tmp_path)


@pytest.fixture
def one_thread():
    """Torch at one thread for the test, as the synthetic studies' commands run (restored
    after): their figures depend on the thread count only through float rounding."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# Their tensors are tiny: at torch's default, a thread a core, each call forks a team whose
# threads wait for each other, most of the CPU time these tests take under make test's two
# workers (docs/testing.md)
ONE_THREAD_FOLDERS = ("relu_attention", "pyramidion", "sparse_softmax")


@pytest.fixture(autouse=True)
def one_thread_here(request):
    """torch at one thread for every test of :data:`ONE_THREAD_FOLDERS` (as before after it);
    a module that checks what threads do overrides this fixture."""
    if request.path.relative_to(Path(__file__).parent).parts[0] in ONE_THREAD_FOLDERS:
        request.getfixturevalue("one_thread")
    yield


@pytest.fixture
def loggers_restored():
    """Every logger as before the test after it (``loggers_put_back``): for a test that calls
    a script's ``main()``, which sets fairseq's log levels, in the test process."""
    from fairseq_in_process import loggers_put_back

    with loggers_put_back():
        yield
