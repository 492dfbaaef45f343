"""One style for the plugin's option errors: fairseq's own, ``fairseq-train: error: ...``.

A bad flag value found while fairseq builds a model, criterion or task is raised as
``OptionError`` (a ``ValueError``, so Python callers can catch it as before). When fairseq's
command line is the caller and nothing catches it, ``install_cli_error_hook`` prints the one line
argparse would print, naming the flag, and exits with argparse's status 2: no traceback.
"""

from __future__ import annotations

import os
import sys
from types import TracebackType
from typing import Type


class OptionError(ValueError):
    """A bad value of a command-line flag; the message names the flag and what it accepts."""

    def __init__(self, flag: str, message: str) -> None:
        self.flag = flag
        super().__init__(message if message.startswith(flag) else f"{flag}: {message}")


def _find_option_error(error: BaseException | None) -> OptionError | None:
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, OptionError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def install_cli_error_hook() -> None:
    """Print an uncaught ``OptionError`` as ``PROG: error: MESSAGE`` and exit with status 2."""
    previous = sys.excepthook
    if getattr(previous, "_relu_former_hook", False):
        return

    def hook(kind: Type[BaseException], error: BaseException,
             traceback: TracebackType | None) -> None:
        found = _find_option_error(error)
        if found is None:
            previous(kind, error, traceback)
            return
        prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "fairseq"
        sys.stdout.flush()
        sys.stderr.write(f"{prog}: error: {found}\n")
        sys.stderr.flush()
        os._exit(2)

    hook._relu_former_hook = True  # type: ignore[attr-defined]
    sys.excepthook = hook
