"""The plugin's user errors: ``CommandLineError`` (a ``ValueError``) naming the flag or file and
the fix. In fairseq's programs the hook prints one as fairseq does, ``PROG: error: ...`` (exit 2
for a flag, 1 for a file), and so a file given as a folder, weights that do not fit the model
and Ctrl-C (exit 130, naming the last checkpoint saved)."""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import sys
from types import TracebackType
from typing import NoReturn, Type


def as_flag(field: str) -> str:
    """The command-line spelling of a config field: ``relu_gamma`` -> ``--relu-gamma``."""
    return "--" + field.replace("_", "-")


class CommandLineError(ValueError):
    """An error the user fixes on the command line; printed as one line, without traceback."""

    exit_status = 1


class OptionError(CommandLineError):
    """A bad value of the flag ``flag``; the message says what it accepts."""

    exit_status = 2

    def __init__(self, flag: str, message: str) -> None:
        self.flag = flag
        super().__init__(message if message.startswith(flag) else f"{flag}: {message}")


class _FileError(CommandLineError):  # a subclass's template names the file and the problem
    template = "{path}: {problem}"

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        super().__init__(self.template.format(path=path, problem=problem))


class CorruptCheckpointError(_FileError):
    template = "checkpoint {path} is corrupt: {problem}"


class DataFileError(_FileError):
    template = "data file {path} {problem}"


class UnsafeCheckpointError(_FileError):  # never advises loading it unsafely
    template = ("checkpoint {path} is refused: it holds {problem}, which no fairseq checkpoint "
                "needs and which could run code when loaded. Do not load it unsafely "
                "(weights_only=False); use a checkpoint from a source you trust, trained with "
                "fairseq or this plugin")


class CheckpointConfigError(_FileError):
    template = ("checkpoint {path} is refused: its config holds {problem}; nothing in it was "
                "run. Use a checkpoint from a source you trust")


# the last checkpoint saved and loaded, named in later errors (set by the checkpoint wrappers)
FILES: dict[str, str | None] = {"saved": None, "loaded": None}


_KEYS = re.compile(r"(Missing|Unexpected) key\(s\) in state_dict: ((?:\"[^\"]*\"(?:, )?)+)")
_SIZES = re.compile(r"size mismatch for ([\w.]+)")
_RELU_FORMER_KEYS = ("rela_gate", "rela_gain", "log_gamma", "relu_output_norm")


def _likely_cause(keys: list[str], sizes: list[str]) -> str:
    if any(part in key for key in keys for part in _RELU_FORMER_KEYS):
        return ("another --attention-activation, --relu-learn-gamma or "
                "--relu-attention-scaling than this model's")
    if keys and all(re.search(r"\.layers\.\d+\.", key) for key in keys):
        return "another number of layers (--encoder-layers, --decoder-layers)"
    if sizes and not keys:
        return "other sizes (--*-embed-dim, --*-ffn-embed-dim, or another dictionary)"
    return "another --arch or other model flags"


def mismatch_error(error: BaseException) -> CommandLineError | None:
    """torch's ``load_state_dict`` error as one line (key counts, the first, the cause)."""
    text = str(error)
    if not isinstance(error, RuntimeError) or "Error(s) in loading state_dict" not in text:
        return None
    parts, keys = [], []
    for kind, listed in _KEYS.findall(text):
        names = re.findall(r"\"([^\"]*)\"", listed)
        keys += names
        parts.append(f"{len(names)} {kind.lower()} (the first: {names[0]})")
    sizes = _SIZES.findall(text)
    if sizes:
        parts.append(f"{len(sizes)} of another shape (the first: {sizes[0]})")
    path = FILES["loaded"] or "the checkpoint"
    return CommandLineError(
        f"the weights of {path} do not fit this model: {', '.join(parts)} keys. It was "
        f"probably trained with {_likely_cause(keys, sizes)}: give the flags it was trained "
        "with")


def _not_a_folder(error: BaseException) -> CommandLineError | None:
    path = getattr(error, "filename", None)
    if isinstance(error, NotADirectoryError) or (
            isinstance(error, FileExistsError) and path and os.path.isfile(path)):
        return CommandLineError(f"{path} is a file, but a folder is expected there: give a "
                               "folder")
    return None


def find_command_line_error(error: BaseException | None) -> CommandLineError | None:
    """The ``CommandLineError`` that ``error`` is, was raised from, or stands for, if any."""
    seen = set()
    while error is not None and id(error) not in seen:
        found = (error if isinstance(error, CommandLineError)
                 else mismatch_error(error) or _not_a_folder(error))
        if found is not None:
            return found
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def is_fairseq_command() -> bool:
    """Whether this process is a fairseq program (``fairseq-*``, ``fairseq_cli/*.py``), by
    ``sys.argv[0]``: fairseq imports ``--user-dir`` inside ``cli_main``, too late to wrap it."""
    script = sys.argv[0] if sys.argv else ""
    return (os.path.basename(script).startswith("fairseq-")
            or os.path.basename(os.path.dirname(script)) == "fairseq_cli")


def _prog() -> str:
    return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "fairseq"


def one_line(error: CommandLineError) -> str:
    """``error`` as argparse prints a bad flag: ``PROG: error: MESSAGE``."""
    return f"{_prog()}: error: {error}"


def interrupted_line() -> str:
    """What Ctrl-C prints: the program, and for a training the last checkpoint it saved."""
    saved = FILES["saved"]
    return f"{_prog()}: interrupted" + (f"; the last checkpoint saved is {saved}" if saved else
                                        "; this run saved no checkpoint" if "train" in _prog()
                                        else "")


def _exit(line: str, status: int) -> NoReturn:
    sys.stdout.flush()
    # os._exit skips multiprocessing's atexit: data workers die first, silently, torch unwarned
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for child in multiprocessing.active_children():
        child.kill()
        child.join(5)
    print(line, file=sys.stderr, flush=True)
    os._exit(status)  # no atexit: the run is over, and its threads may be inside torch


def install_cli_error_hook() -> None:
    """Print an uncaught ``CommandLineError``, and Ctrl-C, as one line and exit."""
    previous = sys.excepthook
    if getattr(previous, "_relu_former_hook", False):
        return

    def hook(kind: Type[BaseException], error: BaseException, traceback: TracebackType) -> None:
        if issubclass(kind, KeyboardInterrupt):
            _exit(interrupted_line(), 130)
        found = find_command_line_error(error)
        if found is not None:
            _exit(one_line(found), found.exit_status)
        previous(kind, error, traceback)

    hook._relu_former_hook = True  # type: ignore[attr-defined]
    sys.excepthook = hook
