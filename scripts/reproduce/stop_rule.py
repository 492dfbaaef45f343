"""When a training to a plateau stops: its patience is spent *and* its valid loss no longer
falls.

fairseq's ``--patience N`` stops at the N-th validation in a row without a new best, which on
a noisy curve can come while the loss still falls (one Table 4 cell trained twice stopped at
6,532 and at 9,656 updates, 0.15 bits apart). So a training stops at the first validation
where the patience is spent and the last W = 2N validations do not fall: the least-squares
slope through (update, valid loss) is not below 0 at one-sided :data:`ALPHA`
(:func:`~scripts.reproduce.direction.falling`). Otherwise it goes on and its log says so
(:data:`GOES_ON`). The same test reads a finished curve (:func:`still_falling`): the claims
refuse a cell that an earlier rule stopped too soon.
"""

from __future__ import annotations

import math
from typing import Sequence

from scripts.reproduce.direction import Trend, falling

# the window for a record that does not say its patience: the toy tables' 4, doubled
TREND_WINDOW = 8
ALPHA = 0.05
# fairseq-train's line when its --patience is spent, and its last line
EARLY_STOP = "early stop since valid performance hasn't improved"
DONE = "done training in"
# the line with which the training overrules an EARLY_STOP before it
GOES_ON = "the patience is spent but the valid loss still falls"


def window(patience: int | None) -> int:
    """The validations the trend is tested on: twice the ``patience``."""
    return 2 * patience if patience and patience > 0 else TREND_WINDOW


def last_trend(curve: Sequence[Sequence[float]] | None, size: int) -> Trend | None:
    """The trend test on the last ``size`` finite validations of ``curve`` (``[[update,
    loss], ...]``), None for a shorter curve."""
    points = [point for point in curve or () if math.isfinite(point[1])][-size:]
    return falling(points) if len(points) == size else None


def trend(curve: Sequence[Sequence[float]], patience: int | None) -> Trend | None:
    return last_trend(curve, window(patience))


def still_falling(curve: Sequence[Sequence[float]] | None, patience: int | None) -> bool:
    """Whether the last :func:`window` validations of ``curve`` fall significantly."""
    found = trend(curve, patience)
    return found is not None and found.p < ALPHA


def goes_on(curve: Sequence[Sequence[float]], patience: int | None) -> str:
    """The log line for a spent patience overruled by the trend of ``curve``."""
    found = trend(curve, patience)
    assert found is not None, "only a falling curve is overruled"
    return (f"{GOES_ON} at update {int(curve[-1][0])} over the last {window(patience)} "
            f"validations ({found.words()}): the training goes on")


def after_last_overrule(text: str, line: str) -> bool:
    """Whether ``line`` occurs in the log ``text`` after its last :data:`GOES_ON`."""
    return text.rfind(line) > text.rfind(GOES_ON)


def stopped_at_plateau(text: str) -> bool:
    """Whether the patience stopped the training of the log ``text`` (not overruled)."""
    return after_last_overrule(text, EARLY_STOP)


def finished(text: str) -> bool:
    """Whether the training of the log ``text`` has ended (not overruled after it)."""
    return after_last_overrule(text, DONE)
