"""argparse ``type=`` callables that check a flag's value when the command line is parsed
(``type=float`` let ``--pooling-base nan`` through to the model): each converts the text, then
runs the flag's one check, so a bad value is argparse's one line. Torch-free."""

from __future__ import annotations

import argparse
import math
from typing import Any, Callable

from relu_former.errors import OptionError

_KINDS = {"float": "a number", "int": "an integer", "str": "a string"}


def argparse_type(flag: str, convert: Callable[[str], Any],
                  check: Callable[[Any], None] | None = None) -> Callable[[str], Any]:
    """``convert`` the text, then ``check`` it; either failing is argparse's one-line error."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            kind = _KINDS.get(convert.__name__, convert.__name__)
            raise argparse.ArgumentTypeError(f"{flag} must be {kind}, got {text!r}") from None
        if check is not None:
            try:
                check(value)
            except ValueError as err:
                raise argparse.ArgumentTypeError(str(err)) from None
        return value

    parse.__name__ = flag  # argparse names the type in some messages
    return parse


def float_above(flag: str, low: float, why: str = "") -> Callable[[str], float]:
    """A finite float strictly greater than ``low`` (``why`` is added to the message)."""

    def check(value: float) -> None:
        if not math.isfinite(value):
            raise ValueError(f"{flag} must be a finite number, got {value}")
        if not value > low:
            raise ValueError(f"{flag} must be > {low:g}{why}, got {value:g}")

    return argparse_type(flag, float, check)


def int_at_least(flag: str, low: int, why: str = "") -> Callable[[str], int]:
    """An integer >= ``low`` (``why`` is added to the message)."""

    def check(value: int) -> None:
        if value < low:
            raise ValueError(f"{flag} must be an integer >= {low}{why}, got {value}")

    return argparse_type(flag, int, check)


def choice_type(choices: tuple, flag: str) -> Callable[[str], str]:
    """One of ``choices``, with the choices in the error."""

    def check(value: str) -> None:
        if value not in choices:
            raise OptionError(flag, f"{value!r} is unknown for {flag}; choose one of "
                              f"{', '.join(choices)}")

    return argparse_type(flag, str, check)


def non_finite_floats(args: argparse.Namespace) -> list[tuple[str, object]]:
    """``(attribute, value)`` of each NaN or infinite float of ``args``, alone or in a list."""
    return [(name, value) for name, value in sorted(vars(args).items())
            if any(isinstance(v, float) and not math.isfinite(v)
                   for v in (value if isinstance(value, (list, tuple)) else [value]))]
