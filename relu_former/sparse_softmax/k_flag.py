"""``--sparse-softmax-k``: the one flag of sparse-softmax's k, in training and in decoding.

The training criteria (``sparse_softmax_cross_entropy``, ``sparse_softmax_sentence_prediction``:
k >= 1, default 20) and the decoding task (``translation_sparse_decoding``: k >= 0, 0 = off,
default 0) share the flag and its destination, ``sparse_softmax_k``, and its check.

Training with both (``--task translation_sparse_decoding --criterion
sparse_softmax_cross_entropy``, so that ``--eval-bleu`` decodes with top-k) registers the flag
twice: fairseq adds the task's first and skips the criterion's (its dataclass parser ignores a
flag the parser already has), and the one value then fills both ``cfg.task`` and
``cfg.criterion``. Its default is then the criterion's, 20: the task's 0 is no k of a loss.

``--sparse-k``, the criteria's spelling until the two were made one, still parses onto the same
destination, with a deprecation warning. Torch- and fairseq-free.
"""

from __future__ import annotations

import argparse
import logging
from typing import Callable

from relu_former.errors import OptionError

logger = logging.getLogger(__name__)

K_FLAG = "--sparse-softmax-k"
K_DEST = "sparse_softmax_k"
LEGACY_K_FLAG = "--sparse-k"
DEFAULT_TRAINING_K = 20  # the paper's best for ~100 classes


def check_k_in_range(k: object, low: int, num_classes: int | None, what: str,
                           meaning: str, at_limit: str) -> None:
    """Raise an OptionError naming --sparse-softmax-k unless ``low <= k <= num_classes``.

    ``num_classes`` (None: not known yet) is the width of the distribution, ``what`` names it
    in the message; ``meaning`` says what the smallest k means, ``at_limit`` what
    ``k = num_classes`` means.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < low:
        raise OptionError(K_FLAG, f"{K_FLAG} must be an integer >= {low} ({meaning}), "
                                  f"got {k!r}")
    if num_classes is not None and k > num_classes:
        raise OptionError(K_FLAG, f"{K_FLAG} {k} is larger than the {what} ({num_classes}); "
                                  f"choose {K_FLAG} <= {num_classes} ({at_limit})")


class _LegacySpelling(argparse.Action):
    """``--sparse-k K``: stored as ``--sparse-softmax-k K``, with a warning."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        logger.warning("%s is deprecated: use %s (read as %s %s)", option_string, K_FLAG,
                       K_FLAG, values)
        setattr(namespace, self.dest, values)


def _has_option(parser: argparse.ArgumentParser, flag: str) -> bool:
    return any(flag in action.option_strings for action in parser._actions)


def add_training_k_flags(parser: argparse.ArgumentParser,
                         add_config_flags: Callable[[], None]) -> None:
    """Add a training criterion's flags: ``add_config_flags`` (fairseq's, from its dataclass,
    which include ``--sparse-softmax-k``), sharing the flag with a task that registered it
    first, and the deprecated ``--sparse-k``."""
    shared = _has_option(parser, K_FLAG)
    add_config_flags()
    if shared:
        parser.set_defaults(**{K_DEST: DEFAULT_TRAINING_K})
    if not _has_option(parser, LEGACY_K_FLAG):
        parser.add_argument(LEGACY_K_FLAG, dest=K_DEST, type=int, action=_LegacySpelling,
                            default=argparse.SUPPRESS, metavar="K",
                            help=f"deprecated spelling of {K_FLAG}")
