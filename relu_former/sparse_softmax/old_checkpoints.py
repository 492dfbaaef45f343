"""Checkpoints saved while the criteria's k was ``--sparse-k`` load as ``--sparse-softmax-k``.

Such a checkpoint holds ``cfg.criterion.sparse_k`` (or ``args.sparse_k``, before fairseq's
configs). ``fairseq-generate`` never builds the criterion and reads it fine, but
``fairseq-validate`` builds the saved criterion, whose config no longer has the field:
omegaconf refuses the unknown key. fairseq upgrades every loaded checkpoint in
``checkpoint_utils._upgrade_state_dict`` and offers no hook, so the plugin wraps that function
(marked, so installing twice is harmless) to rename the key first.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from relu_former.fairseq_fixes import wrap_once
from relu_former.sparse_softmax.k_flag import K_DEST

LEGACY_DEST = "sparse_k"
CRITERIA = ("sparse_softmax_cross_entropy", "sparse_softmax_sentence_prediction")


def upgrade_saved_k(state: dict) -> None:
    """Rename ``sparse_k`` to ``sparse_softmax_k`` in a loaded checkpoint's args and cfg."""
    from omegaconf import OmegaConf, open_dict

    args = state.get("args")
    if getattr(args, "criterion", None) in CRITERIA and hasattr(args, LEGACY_DEST):
        setattr(args, K_DEST, getattr(args, LEGACY_DEST))
        delattr(args, LEGACY_DEST)
    criterion = (state.get("cfg") or {}).get("criterion")
    if criterion is not None and criterion.get("_name") in CRITERIA \
            and LEGACY_DEST in criterion:
        if OmegaConf.is_config(criterion):
            with open_dict(criterion):
                criterion[K_DEST] = criterion.pop(LEGACY_DEST)
        else:
            criterion[K_DEST] = criterion.pop(LEGACY_DEST)


def _upgrading_saved_k(original: Callable) -> Callable:
    @functools.wraps(original)
    def _upgrade_state_dict(state: dict) -> Any:
        upgrade_saved_k(state)  # the args, before fairseq turns them into a cfg
        state = original(state)
        upgrade_saved_k(state)
        return state

    return _upgrade_state_dict


def upgrade_old_sparse_k_checkpoints() -> None:
    """Install the renaming on ``fairseq.checkpoint_utils`` (idempotent)."""
    from fairseq import checkpoint_utils

    wrap_once(checkpoint_utils, "_upgrade_state_dict", _upgrading_saved_k)
