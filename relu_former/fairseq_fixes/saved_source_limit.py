"""``fairseq-generate`` bounds sources at the checkpoint's ``--max-source-positions`` unless
typed (it used its own default 1024: ``--truncate-source`` cut an 8192-token model's inputs).
No probe: a typed flag or the default is left as it is."""

from __future__ import annotations

import functools
import logging
import sys
from typing import Callable

from relu_former.fairseq_fixes.parse_checks import typed_flags

logger = logging.getLogger(__name__)

FLAG = "--max-source-positions"


def with_saved_source_limit(original: Callable) -> Callable:
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
