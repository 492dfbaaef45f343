"""fairseq's two checkpoint loaders, each wrapped once; every check a plain function of its own
module, run in this order.

``checkpoint_utils.load_checkpoint_to_cpu(path)``, which every command reads a checkpoint with:

1. the file is whole (``checkpoint_files.checkpoint_problem``): else ``CorruptCheckpointError``
   naming it, before torch reads a byte (torch loads a member that fails its CRC silently);
2. fairseq loads it; what the safe loader refuses (``checkpoint_files.refused_global``) is an
   ``UnsafeCheckpointError``, never torch's advice to load it unsafely;
3. its config strings are data (``literal_config.checkpoint_config_problem``): else
   ``CheckpointConfigError`` naming the field, before fairseq evaluates or splits it;
4. the embedding rows are moved to the data's dictionary when ``Trainer.load_checkpoint``
   asked for it (``dictionary_check.move_embedding_rows``).

``Trainer.load_checkpoint(filename, reset_optimizer)``, a training's resume or fine-tuning:

1. the model flags mean what the checkpoint's do (``resume_check.check_resume``);
2. the dictionaries match, or the change is accepted
   (``dictionary_check.changed_dictionaries``);
3. fairseq loads it; weights that do not fit the model end as one line naming how many keys,
   the first and the likely cause (``errors.mismatch_error``, from fairseq's own error).

No probe: these are checks fairseq does not make; a whole, plain, matching checkpoint loads
unchanged.
"""

from __future__ import annotations

import functools
import logging
import os
import pickle
from typing import Callable

from relu_former.errors import (
    CheckpointConfigError,
    CorruptCheckpointError,
    UnsafeCheckpointError,
    note_loaded,
)
from relu_former.fairseq_fixes.checkpoint_files import checkpoint_problem, is_local, refused_global
from relu_former.fairseq_fixes.dictionary_check import changed_dictionaries, move_embedding_rows
from relu_former.fairseq_fixes.literal_config import checkpoint_config_problem
from relu_former.fairseq_fixes.resume_check import check_resume
from relu_former.fairseq_fixes.wrap_once import wrap_once

logger = logging.getLogger(__name__)

# the row moves for the checkpoint Trainer.load_checkpoint is loading, by its absolute path:
# fairseq reads the file inside that method, with no hook between reading and loading
_PENDING_MOVES: dict[str, Callable[[dict], None]] = {}


def _checked_loader(original: Callable) -> Callable:
    @functools.wraps(original)
    def load_checkpoint_to_cpu(path, arg_overrides=None, load_on_all_ranks=False):
        note_loaded(str(path))
        problem = checkpoint_problem(path) if is_local(path) and os.path.isfile(path) else None
        if problem is not None:
            raise CorruptCheckpointError(str(path), problem)
        try:
            state = original(path, arg_overrides=arg_overrides,
                             load_on_all_ranks=load_on_all_ranks)
        except pickle.UnpicklingError as error:
            what = refused_global(error)
            if what is None:
                raise
            # `from None`: torch's message advises weights_only=False, the one thing not to do
            raise UnsafeCheckpointError(str(path), what) from None
        problem = checkpoint_config_problem(state)
        if problem is not None:
            raise CheckpointConfigError(str(path), problem)
        move = _PENDING_MOVES.get(os.path.abspath(str(path)))
        if move is not None and isinstance(state.get("model"), dict):
            move(state["model"])
        return state

    return load_checkpoint_to_cpu


def _saved_state(filename: str) -> dict | None:
    """The pickled structure of the checkpoint ``filename`` (its tensors mapped, not read), or
    None where there is none to read: fairseq's own load then says why, naming the file."""
    import torch

    try:
        state = torch.load(filename, map_location="cpu", mmap=True, weights_only=True)
    except Exception:
        return None
    return state if isinstance(state, dict) else None


def _checked_trainer_load(original: Callable) -> Callable:
    @functools.wraps(original)
    def load_checkpoint(self, filename, reset_optimizer=False, *args, **kwargs):
        state = _saved_state(filename) if os.path.isfile(filename) else None
        changed = {}
        if state is not None:
            check_resume(self, state, filename, reset_optimizer)
            changed = changed_dictionaries(self, state, filename, reset_optimizer)
        if not changed:
            return original(self, filename, reset_optimizer, *args, **kwargs)

        def move(weights: dict) -> None:
            for line in move_embedding_rows(weights, self.get_model(), changed):
                logger.info(f"{filename}: {line}")

        key = os.path.abspath(filename)
        _PENDING_MOVES[key] = move
        try:
            return original(self, filename, reset_optimizer, *args, **kwargs)
        finally:
            del _PENDING_MOVES[key]

    return load_checkpoint


def check_checkpoint_loading() -> None:
    """Wrap both loaders (idempotent)."""
    from fairseq import checkpoint_utils
    from fairseq.trainer import Trainer

    wrap_once(checkpoint_utils, "load_checkpoint_to_cpu", _checked_loader)
    wrap_once(Trainer, "load_checkpoint", _checked_trainer_load)
