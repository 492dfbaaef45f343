"""argparse ``type=`` callables that check a flag's value when the command line is parsed.

``float("nan")`` and ``float("inf")`` are valid Python floats, so ``type=float`` lets
``--pooling-base nan`` through to the model, where it aborts the process far from the flag.
These types refuse such values at parse time: argparse then prints
``PROG: error: argument --flag: <why>`` and exits with status 2, as for any bad flag. Each
factory takes the flag's name so that the message can say what it accepts.
"""

from __future__ import annotations

import argparse
import math
from typing import Callable


def _number(flag: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{flag} must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{flag} must be a finite number, got {text!r}")
    return value


def finite_float(flag: str) -> Callable[[str], float]:
    """A float that is neither NaN nor infinite."""

    def parse(text: str) -> float:
        return _number(flag, text)

    parse.__name__ = flag  # argparse names the type in some messages
    return parse


def float_above(flag: str, low: float, why: str = "") -> Callable[[str], float]:
    """A finite float strictly greater than ``low`` (``why`` is added to the message)."""

    def parse(text: str) -> float:
        value = _number(flag, text)
        if not value > low:
            raise argparse.ArgumentTypeError(
                f"{flag} must be > {low:g}{why}, got {text!r}")
        return value

    parse.__name__ = flag
    return parse


def int_at_least(flag: str, low: int) -> Callable[[str], int]:
    """An integer >= ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{flag} must be an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{flag} must be >= {low}, got {text!r}")
        return value

    parse.__name__ = flag
    return parse


def non_finite_floats(args: argparse.Namespace) -> list[tuple[str, object]]:
    """The ``(attribute, value)`` pairs of ``args`` holding a NaN or infinite float (alone or
    in a list, as fairseq's ``--lr``): what no flag of fairseq or of the plugin accepts."""
    found = []
    for name, value in sorted(vars(args).items()):
        values = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(v, float) and not math.isfinite(v) for v in values):
            found.append((name, value))
    return found
