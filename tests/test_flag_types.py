"""flag_types.py: every parse-time type is one convert-then-check, failing as argparse's
one-line error; a check shared with the model gives the same message from the command line."""

from __future__ import annotations

import argparse
import math

import pytest

from relu_former.flag_types import (
    argparse_type,
    choice_type,
    float_above,
    int_at_least,
    non_finite_floats,
)
from relu_former.relu_attention.config import check_relu_gamma


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "infinity", "1e400"])
def test_float_above_refuses_nan_and_inf(text):
    with pytest.raises(argparse.ArgumentTypeError, match=r"--x must be a finite number"):
        float_above("--x", 1.0)(text)


def test_float_above_and_int_at_least_check_the_bound():
    assert float_above("--x", 1.0)("20") == 20.0
    with pytest.raises(argparse.ArgumentTypeError, match=r"--x must be > 1 \(why\), got 1$"):
        float_above("--x", 1.0, " (why)")("1")
    assert int_at_least("--n", 0)("0") == 0
    with pytest.raises(argparse.ArgumentTypeError, match=r"--n must be an integer >= 1, got 0"):
        int_at_least("--n", 1)("0")


@pytest.mark.parametrize("make, text, message", [
    (lambda: int_at_least("--n", 0), "2.5", "--n must be an integer, got '2.5'"),
    (lambda: float_above("--x", 0), "abc", "--x must be a number, got 'abc'"),
    (lambda: choice_type(("a", "b"), "--c"), "z", "'z' is unknown for --c; choose one of a, b"),
])
def test_text_that_does_not_convert_or_choose_names_the_flag(make, text, message):
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        make()(text)
    assert message in str(caught.value)


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "0", "abc"])
def test_a_model_check_is_the_parse_error(text):
    parse = argparse_type("--relu-gamma", float, check_relu_gamma)
    with pytest.raises(argparse.ArgumentTypeError, match="--relu-gamma must be"):
        parse(text)
    assert parse("0.5") == 0.5


def test_non_finite_floats_are_found_alone_and_in_lists():
    args = argparse.Namespace(a=1.0, b=math.nan, c=[0.1, math.inf], d="nan", e=3)
    assert [name for name, _ in non_finite_floats(args)] == ["b", "c"]
