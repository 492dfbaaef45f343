"""Runs fairseq's console scripts in processes forked from one that imported fairseq once.

Every ``fairseq-train`` / ``-generate`` / ``-preprocess`` on this machine spends about 5 s
importing torch, scikit-learn, scipy and fairseq's registries and composing hydra's config
before it reads a byte of data; the suite runs a few hundred of them on data that trains in
under a second. This server (one per test worker, started by :func:`helpers.run_command` on
first use) imports those libraries once and never runs a torch operation. Each command then
runs in a child forked from it, which is a process of its own like any other: its own argv,
working folder, environment, stdin, stdout and stderr files and exit status. The child imports
the command's ``fairseq_cli`` module and the plugin itself (fairseq imports ``--user-dir`` as in
any run), calls the console script's entry function and exits through the interpreter's
normal shutdown (atexit handlers included).

What the fork cannot give is a fresh interpreter. Tests of start-up, of imports, of
interpreter shutdown and of thread settings read at library load ask for one
(``run_command(..., fresh=True)``), and so does any command whose environment differs from
the server's in what is read at start-up (see ``STARTUP_ENV``).

Protocol: one JSON object per line on stdin (``argv``, ``cwd``, ``env``, ``stdin``,
``stdout``, ``stderr`` file paths, ``timeout`` seconds); one JSON line back on stdout,
``{"returncode": N, "timed_out": bool}``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from importlib import import_module, metadata
from importlib.util import find_spec
from pathlib import Path

# read once, when the interpreter or a library starts: a child with other values would not
# see them, so such a command runs as a plain subprocess
STARTUP_ENV = ("PYTHONPATH", "PYTHONHASHSEED", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
               "PYTHONWARNINGS", "PYTHONDONTWRITEBYTECODE", "LD_PRELOAD", "LD_LIBRARY_PATH")
PRELOAD = ("torch", "numpy", "sklearn.metrics", "scipy.stats", "hydra", "omegaconf",
           "fairseq.tasks", "fairseq.criterions", "fairseq.models", "fairseq.options",
           "fairseq.checkpoint_utils", "fairseq.sequence_generator", "fairseq.trainer")


def console_scripts() -> dict[str, str]:
    """fairseq's console scripts, name -> "module:function"."""
    return {entry.name: entry.value for entry in metadata.entry_points(group="console_scripts")
            if entry.value.startswith("fairseq_cli.")}


def run_child(request: dict, entry: str) -> None:
    """In the forked child: become the command; never returns (exits through SystemExit)."""
    os.setpgid(0, 0)  # its own group, so that a timeout ends what it started too
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    stdin = os.open(request["stdin"], os.O_RDONLY)
    stdout = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    stderr = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    script = request["argv"][0]
    sys.argv = [script, *request["argv"][1:]]
    sys.path[0] = os.path.dirname(script)  # where a console script's interpreter puts it
    # multiprocessing's spawn re-imports the main module by this path: the console script
    sys.modules["__main__"].__file__ = script
    module, function = entry.split(":")
    if configures_logging_first(module):
        # this module's logging.basicConfig runs before it imports fairseq, so in a new
        # process it is the first and wins over the one a fairseq module runs when imported
        # (the preload ran that one here)
        for handler in list(logging.root.handlers):
            logging.root.removeHandler(handler)
        logging.root.setLevel(logging.WARNING)
    sys.exit(getattr(import_module(module), function)())


def configures_logging_first(module: str) -> bool:
    """Whether ``module`` calls ``logging.basicConfig`` before its first fairseq import."""
    lines = Path(find_spec(module).origin).read_text().splitlines()
    first = {kind: next((i for i, line in enumerate(lines) if line.startswith(starts)), None)
             for kind, starts in (("config", "logging.basicConfig("),
                                  ("fairseq", ("from fairseq", "import fairseq")))}
    return first["config"] is not None and (first["fairseq"] is None
                                            or first["config"] < first["fairseq"])


def wait(pid: int, timeout: float) -> tuple[int, bool]:
    """The child's exit status as subprocess reports it (-N for signal N), and whether it was
    killed for running past ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), False
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return -signal.SIGKILL, True
        time.sleep(0.02)


def serve() -> None:
    entries = console_scripts()
    for name in PRELOAD:
        import_module(name)
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)  # a stray print of the server's must not reach the protocol
    os.close(quiet)
    print(json.dumps({"ready": sorted(entries)}), file=reply)
    for line in sys.stdin:
        request = json.loads(line)
        entry = entries[os.path.basename(request["argv"][0])]
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            reply.close()
            run_child(request, entry)
        returncode, timed_out = wait(pid, request["timeout"])
        print(json.dumps({"returncode": returncode, "timed_out": timed_out}), file=reply)


if __name__ == "__main__":
    serve()
