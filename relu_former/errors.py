"""One style for the plugin's user errors: fairseq's own, ``fairseq-train: error: ...``.

A bad flag value found while fairseq builds a model, criterion or task is raised as
``OptionError``; a checkpoint file that cannot be read as one is a ``CorruptCheckpointError``,
one the safe loader refuses an ``UnsafeCheckpointError``. All are ``CommandLineError``s
(``ValueError``s, so Python callers can catch them as before).
When fairseq's command line is the caller (``is_fairseq_command``) and nothing catches one,
``install_cli_error_hook`` prints the one line argparse would print and exits without a
traceback: status 2 for a bad flag, as argparse does, status 1 for a bad file.
"""

from __future__ import annotations

import os
import sys
from types import TracebackType
from typing import NoReturn, Type


class CommandLineError(ValueError):
    """An error the user fixes on the command line; printed as one line, without traceback."""

    exit_status = 1


class OptionError(CommandLineError):
    """A bad value of a command-line flag; the message names the flag and what it accepts."""

    exit_status = 2

    def __init__(self, flag: str, message: str) -> None:
        self.flag = flag
        super().__init__(message if message.startswith(flag) else f"{flag}: {message}")


class CorruptCheckpointError(CommandLineError):
    """A checkpoint file that is empty, cut short or not a checkpoint; the message names it."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        super().__init__(f"checkpoint {path} is corrupt: {problem}")


class DataFileError(CommandLineError):
    """A binarized data file that is missing its other half, cut short or empty; the
    message names the file and the fix."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        super().__init__(f"data file {path} {problem}")


class UnsafeCheckpointError(CommandLineError):
    """A checkpoint holding something the safe (``weights_only``) loader refuses: code, or a
    class no fairseq checkpoint needs. The message names the file and what it holds, and never
    suggests loading it unsafely."""

    def __init__(self, path: str, what: str) -> None:
        self.path = path
        super().__init__(
            f"checkpoint {path} is refused: it holds {what}, which no fairseq checkpoint needs "
            "and which could run code when loaded. Do not load it unsafely (weights_only=False)"
            "; use a checkpoint from a source you trust, trained with fairseq or this plugin")


def find_command_line_error(error: BaseException | None) -> CommandLineError | None:
    """The ``CommandLineError`` that ``error`` is or was raised from, if any."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, CommandLineError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def is_fairseq_command() -> bool:
    """Whether this process is one of fairseq's command-line programs.

    Judged by how the process was started, ``sys.argv[0]``: every console script fairseq
    installs is named ``fairseq-*`` (``fairseq-train``, ``fairseq-hydra-train``, ...), and
    ``python -m fairseq_cli.train`` runs ``fairseq_cli/train.py``. Wrapping the scripts'
    ``cli_main`` instead cannot work: fairseq imports ``--user-dir`` from inside ``cli_main``,
    when that call has already begun. A notebook, a test runner or a library that imports the
    plugin keeps its own ``sys.excepthook``.
    """
    script = sys.argv[0] if sys.argv else ""
    return (os.path.basename(script).startswith("fairseq-")
            or os.path.basename(os.path.dirname(script)) == "fairseq_cli")


def one_line(error: CommandLineError) -> str:
    """``error`` as argparse prints a bad flag: ``PROG: error: MESSAGE``, PROG being the
    running command (``sys.argv[0]``)."""
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "fairseq"
    return f"{prog}: error: {error}"


def exit_with_one_line(error: CommandLineError) -> NoReturn:
    """Print ``error`` as :func:`one_line` and exit with its status."""
    sys.stdout.flush()
    sys.stderr.write(one_line(error) + "\n")
    sys.stderr.flush()
    os._exit(error.exit_status)


def install_cli_error_hook() -> None:
    """Print an uncaught ``CommandLineError`` as ``PROG: error: MESSAGE`` and exit."""
    previous = sys.excepthook
    if getattr(previous, "_relu_former_hook", False):
        return

    def hook(kind: Type[BaseException], error: BaseException,
             traceback: TracebackType | None) -> None:
        found = find_command_line_error(error)
        if found is None:
            previous(kind, error, traceback)
            return
        exit_with_one_line(found)

    hook._relu_former_hook = True  # type: ignore[attr-defined]
    sys.excepthook = hook
