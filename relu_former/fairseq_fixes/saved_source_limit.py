"""``fairseq-generate`` cuts and bounds sources at the checkpoint's own limit.

fairseq-generate builds the translation task from its own command line, so its
``--max-source-positions`` is fairseq's default (1024) unless typed again, whatever the
checkpoint was trained with: ``--truncate-source`` then cuts the inputs of a model trained on
8192 tokens to 1024 without a word, or leaves inputs longer than a 256-token model can take
(fairseq then stops at the first one). It hands the checkpoint's saved task configuration to
``load_dataset`` (``task_cfg``); when the flag was not typed, the task takes the saved limit
from there, and says so in the log. A typed ``--max-source-positions`` is kept as typed.
(fairseq-validate builds its task from the saved configuration, so it has the limit already.)
"""

from __future__ import annotations

import functools
import logging
import sys
from typing import Callable

from relu_former.fairseq_fixes.parse_checks import typed_flags
from relu_former.fairseq_fixes.wrap_once import wrap_once

logger = logging.getLogger(__name__)

FLAG = "--max-source-positions"


def _with_saved_source_limit(original: Callable) -> Callable:
    from fairseq.tasks.translation import TranslationConfig

    default = TranslationConfig.max_source_positions  # the dataclass default, 1024

    @functools.wraps(original)
    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        saved = getattr(kwargs.get("task_cfg"), "max_source_positions", None)
        current = self.cfg.max_source_positions
        if (saved and saved != current and current == default
                and FLAG not in typed_flags(sys.argv[1:])):
            logger.info(f"{FLAG} not given: using the checkpoint's {saved} (cuts sources with "
                        "--truncate-source, and bounds them)")
            self.cfg.max_source_positions = saved
        return original(self, split, epoch=epoch, combine=combine, **kwargs)

    return load_dataset


def use_saved_source_limit() -> None:
    """Install the fix on fairseq's ``TranslationTask`` (and so on its subclasses)."""
    from fairseq.tasks.translation import TranslationTask

    wrap_once(TranslationTask, "load_dataset", _with_saved_source_limit)
