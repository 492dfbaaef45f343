"""Runs one of fairseq's console scripts inside the test process, as fairseq's own tests call
``fairseq_cli.train.main()``.

A new ``fairseq-train`` spends about 5 s importing torch, scikit-learn, scipy and fairseq's
registries before it reads the toy data, which trains in under a second; in the test process
those imports happened once. For the call, the command gets what a process of its own would
have: its argv, working folder, environment, stdin, its stdout and stderr (captured), torch's
thread count from ``OMP_NUM_THREADS``, the root logging handler its ``fairseq_cli`` module
sets up, Python's default warning filters, and its exit status: ``SystemExit``'s code, or the
status and the one line the plugin's ``sys.excepthook`` prints for an uncaught error
(``relu_former.errors.one_line``). After it, all of that is put back, the background batch
threads the plugin stops at exit are stopped, and the fairseq state that outlives a call
(best checkpoint and early-stopping scores, metrics) is reset before the next one.

What a call cannot be is a process: it cannot be killed (so it has no timeout), it never starts
or shuts down an interpreter, and it cannot change what libraries read when they load. Tests
of those ask ``run_command`` for a new interpreter (``fresh=True``), and so does any command
that sets an environment variable of ``STARTUP_ENV``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from functools import cache
from importlib import import_module, metadata
from importlib.util import find_spec
from pathlib import Path
from types import TracebackType
from typing import Iterator, Sequence

import numpy as np
import torch
from fairseq import checkpoint_utils
from fairseq.logging import metrics

# Imported here, before a command names itself fairseq-* in sys.argv: the plugin then keeps
# the test process's sys.excepthook (errors.is_fairseq_command), which a call replaces itself.
from relu_former.errors import find_command_line_error, one_line
from relu_former.fairseq_fixes.batch_thread_exit import stop_batch_threads
from relu_former.plugin import install_command_fixes
from scripts.common.child_processes import _end_with_parent

# read when the interpreter or a library starts: a command that sets one needs a new process
STARTUP_ENV = ("PYTHONPATH", "PYTHONHASHSEED", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
               "PYTHONWARNINGS", "PYTHONDONTWRITEBYTECODE", "LD_PRELOAD", "LD_LIBRARY_PATH")

# Python's own filters when no -W or PYTHONWARNINGS is given (pytest's show every warning)
DEFAULT_WARNING_FILTERS = (("default", DeprecationWarning, "__main__"),
                           ("ignore", DeprecationWarning, ""),
                           ("ignore", PendingDeprecationWarning, ""),
                           ("ignore", ImportWarning, ""), ("ignore", ResourceWarning, ""))


@cache
def console_scripts() -> dict[str, str]:
    """fairseq's console scripts, name -> "module:function"."""
    return {entry.name: entry.value for entry in metadata.entry_points(group="console_scripts")
            if entry.value.startswith("fairseq_cli.")}


def runs_in_process(args: Sequence[str], env: dict | None) -> bool:
    """Whether ``args`` is a fairseq console script that needs no process of its own."""
    return (Path(args[0]).name in console_scripts()
            and not any(name in STARTUP_ENV for name in env or {}))


@cache
def logs_to_stdout(module: str) -> bool:
    """Whether ``module``'s own ``logging.basicConfig`` (to stdout, at ``LOGLEVEL``) is the
    first a new process of it runs: one at import, before it imports fairseq. Otherwise the
    first is that of a fairseq task module, ``fairseq.tasks.text_to_speech``: stderr, INFO."""
    lines = Path(find_spec(module).origin).read_text().splitlines()
    first = [next((i for i, line in enumerate(lines) if line.startswith(starts)), len(lines))
             for starts in ("logging.basicConfig(", ("from fairseq", "import fairseq"))]
    return first[0] < first[1]


def _root_handler(module: str) -> tuple[logging.Handler, int]:
    """The root handler and level a new process of ``module`` starts with."""
    stdout = logs_to_stdout(module)
    handler = logging.StreamHandler(sys.stdout if stdout else sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s | %(levelname)s | %(name)s | "
                                           "%(message)s", datefmt="%Y-%m-%d %H:%M:%S"))
    level = os.environ.get("LOGLEVEL", "INFO").upper() if stdout else "INFO"
    return handler, logging.getLevelName(level)


def _loggers() -> list[logging.Logger]:
    return [logging.root] + [logger for logger in logging.Logger.manager.loggerDict.values()
                             if isinstance(logger, logging.Logger)]


def _states() -> dict[logging.Logger, tuple]:
    return {logger: (logger.level, list(logger.handlers), logger.propagate, logger.disabled)
            for logger in _loggers()}


def _set_states(states: dict[logging.Logger, tuple], close_others: bool) -> None:
    """Every logger as in ``states``; one not there as a new one is (no level, no handler);
    with ``close_others``, the handlers not in ``states`` closed (the call's)."""
    for logger in _loggers():
        level, handlers, propagate, disabled = states.get(
            logger, (logging.NOTSET, [], True, False))
        for added in set(logger.handlers) - set(handlers) if close_others else ():
            added.close()
        logger.handlers = list(handlers)
        logger.setLevel(level)
        logger.propagate, logger.disabled = propagate, disabled


@contextlib.contextmanager
def loggers_put_back() -> Iterator[None]:
    """Every logger's level and handlers after the block as before it, the handlers added in
    it closed: for a script's ``main()`` called in the test process (a ``quiet_fairseq``,
    fairseq-preprocess's log file)."""
    saved = _states()
    try:
        yield
    finally:
        _set_states(saved, close_others=True)


# The loggers as fairseq's and the plugin's imports leave them, which a command starts with;
# noted when the conftest imports this module, before a test's code (a script's
# quiet_fairseq, say) sets the "fairseq" logger to WARNING
_IMPORTED_STATES = {logger: state for logger, state in _states().items()
                    if logger is not logging.root}  # the root's is the command's own


@contextlib.contextmanager
def _logging_of(module: str) -> Iterator[None]:
    """Logging as a new process of ``module`` has it; every logger's state put back after
    (hydra's dictConfig and fairseq's --log-file change more than the root)."""
    saved, disabled = _states(), logging.root.manager.disable
    # logging.config.dictConfig (hydra's, fairseq's job logging) closes every handler in
    # logging's registry, pytest's log file included: the call sees only its own
    registry = (logging._handlerList[:], dict(logging._handlers))
    del logging._handlerList[:]
    logging._handlers.clear()
    _set_states(_IMPORTED_STATES, close_others=False)
    logging.disable(logging.NOTSET)
    handler, level = _root_handler(module)
    logging.root.handlers = [handler]
    logging.root.setLevel(level)
    try:
        yield
    finally:
        _set_states(saved, close_others=True)
        logging.disable(disabled)
        logging._handlerList[:] = registry[0]
        logging._handlers.clear()
        logging._handlers.update(registry[1])


def _print_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Python's ``warnings.showwarning``: the warning on (this call's) ``sys.stderr``."""
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


@contextlib.contextmanager
def _process_state(args: list[str], cwd: Path | None, env: dict, stdin, stdout,
                   stderr) -> Iterator[None]:
    """argv, folder, environment, standard streams, threads, random states and warning filters
    of the command for the block, the test process's after it."""
    saved = (sys.argv, os.getcwd(), dict(os.environ), sys.stdin, sys.stdout, sys.stderr,
             sys.excepthook, torch.get_num_threads(), torch.get_rng_state(),
             np.random.get_state(), random.getstate())
    try:
        sys.argv = list(args)
        os.chdir(cwd or os.getcwd())
        os.environ.clear()
        os.environ.update(env)
        sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
        if env.get("OMP_NUM_THREADS", "").isdigit():
            torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
        with warnings.catch_warnings():
            warnings.resetwarnings()
            for action, category, module in reversed(DEFAULT_WARNING_FILTERS):
                warnings.filterwarnings(action, category=category, module=module)
            warnings.showwarning = _print_warning  # to the command's stderr, not pytest's list
            yield
    finally:
        (sys.argv, cwd_before, environ, sys.stdin, sys.stdout, sys.stderr, sys.excepthook,
         threads, torch_rng, numpy_rng, python_rng) = saved
        os.chdir(cwd_before)
        os.environ.clear()
        os.environ.update(environ)
        torch.set_num_threads(threads)
        torch.set_rng_state(torch_rng)
        np.random.set_state(numpy_rng)
        random.setstate(python_rng)


def _reset_fairseq_state() -> None:
    """Forget what an earlier command left in fairseq's module globals: a new process starts
    without a best checkpoint score, an early-stopping count or logged metrics."""
    for function in (checkpoint_utils.save_checkpoint,
                     getattr(sys.modules.get("fairseq_cli.train"), "should_stop_early", None)):
        for name in ("best", "num_runs"):
            if function is not None and hasattr(function, name):
                delattr(function, name)
    metrics.reset()


def _exit_status(code: object) -> int:
    """The status a process exiting with ``SystemExit(code)`` has (and its message printed)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _call(entry: str) -> int:
    """Call ``module:function`` as the console script does; its exit status."""
    statuses: list[int] = []

    def report(kind: type[BaseException], error: BaseException,
               trace: TracebackType | None) -> None:
        # what the plugin's hook does, without ending the process; the hooks a command adds
        # (fairseq-hydra-train's config keys) wrap this one as they wrap the plugin's
        found = find_command_line_error(error)
        if found is None:
            traceback.print_exception(kind, error, trace)
            statuses.append(1)
        else:
            sys.stdout.flush()
            sys.stderr.write(one_line(found) + "\n")
            statuses.append(found.exit_status)

    sys.excepthook = report
    module, function = entry.split(":")
    try:
        return _exit_status(getattr(import_module(module), function)())
    except SystemExit as done:
        return _exit_status(done.code)
    except Exception as error:  # noqa: BLE001  (the process's uncaught error)
        sys.excepthook(type(error), error, error.__traceback__)
        return statuses[-1] if statuses else 1


def run_in_process(args: Sequence[str], cwd: Path | None, env: dict,
                   input: str | None) -> subprocess.CompletedProcess:
    """Run the fairseq console script ``args[0]`` with ``args``, in ``cwd`` with ``env`` and
    ``input`` on its stdin, in this process; its status and output as ``subprocess.run``'s."""
    entry = console_scripts()[Path(args[0]).name]
    module = entry.split(":")[0]
    with tempfile.TemporaryDirectory(prefix="fairseq-command-") as folder:
        files = {name: Path(folder) / name for name in ("stdin", "stdout", "stderr")}
        files["stdin"].write_text(input or "")
        with contextlib.ExitStack() as stack:
            stdin, stdout, stderr = (stack.enter_context(open(files[name], mode))
                                     for name, mode in (("stdin", "r"), ("stdout", "w"),
                                                        ("stderr", "w")))
            stack.enter_context(_process_state(list(args), cwd, env, stdin, stdout, stderr))
            stack.enter_context(_logging_of(module))
            try:
                import_module(module)  # the first time, its basicConfig is a no-op: the
                # call's root handler is there
                install_command_fixes()  # as when the command loads the plugin, for a
                # module imported after it
                _reset_fairseq_state()
                status = _call(entry)
            finally:
                stop_batch_threads()  # as the plugin does at exit
                sys.stdout.flush()
                sys.stderr.flush()
        out, err = files["stdout"].read_text(), files["stderr"].read_text()
    return subprocess.CompletedProcess(list(args), status, out, err)


def forked_command(args: list, cwd: Path, env: dict, log: Path) -> int:
    """The pid of a fork of this process that runs the fairseq command ``args`` as
    ``run_command`` runs one in the test process, writes its stdout and stderr to ``log`` and
    exits with its status; it ends with the test process, as the project's children do."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 1
        try:
            _end_with_parent()
            proc = run_in_process([str(a) for a in args], cwd, env, None)
            log.write_text(proc.stdout + proc.stderr)
            status = proc.returncode
        except BaseException:  # noqa: BLE001  (reported in the log, never raised into pytest)
            log.write_text(traceback.format_exc())
        finally:
            os._exit(status)
    return pid


def exit_codes(pids: list[int], timeout_s: float) -> list[int]:
    """The exit statuses of the forked ``pids``; those still running after ``timeout_s`` are
    killed (status -9)."""
    codes, deadline = {}, time.monotonic() + timeout_s
    while len(codes) < len(pids):
        for pid in set(pids) - set(codes):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                codes[pid] = os.waitstatus_to_exitcode(status)
            elif time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    return [codes[pid] for pid in pids]
