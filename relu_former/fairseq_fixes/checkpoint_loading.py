"""fairseq's two checkpoint loaders, each wrapped once, running plain checks in this order.

``load_checkpoint_to_cpu`` (every read): the file is whole (torch loads a bad CRC silently) ->
a refused pickle is our one line, not torch's advice to load it unsafely -> config strings are
data (``literal_config``) -> embedding rows move to the data's dictionary, if accepted.
``Trainer.load_checkpoint`` (a resume): the flags mean what the checkpoint's do
(``resume_check``) -> the dictionaries match (``dictionary_check``) -> fairseq loads it.
No probe: checks fairseq does not make; a whole, plain, matching checkpoint loads unchanged."""

from __future__ import annotations

import functools
import logging
import os
import pickle
from typing import Callable

from relu_former import errors
from relu_former.fairseq_fixes.checkpoint_files import checkpoint_problem, is_local, refused_global
from relu_former.fairseq_fixes.dictionary_check import changed_dictionaries, move_embedding_rows
from relu_former.fairseq_fixes.literal_config import checkpoint_config_problem
from relu_former.fairseq_fixes.resume_check import check_resume

logger = logging.getLogger(__name__)

# absolute path -> (model, changed dictionaries) of the checkpoint Trainer.load_checkpoint is
# loading: fairseq reads the file inside that method, with no hook between reading and loading
_PENDING_MOVES: dict[str, tuple] = {}


def checked_loader(original: Callable) -> Callable:
    @functools.wraps(original)
    def load_checkpoint_to_cpu(path, arg_overrides=None, load_on_all_ranks=False):
        errors.FILES["loaded"] = str(path)
        problem = checkpoint_problem(path) if is_local(path) and os.path.isfile(path) else None
        if problem is not None:
            raise errors.CorruptCheckpointError(str(path), problem)
        try:
            state = original(path, arg_overrides=arg_overrides,
                             load_on_all_ranks=load_on_all_ranks)
        except pickle.UnpicklingError as error:
            what = refused_global(error)
            if what is None:
                raise
            # `from None`: torch's message advises weights_only=False, the one thing not to do
            raise errors.UnsafeCheckpointError(str(path), what) from None
        problem = checkpoint_config_problem(state)
        if problem is not None:
            raise errors.CheckpointConfigError(str(path), problem)
        pending = _PENDING_MOVES.get(os.path.abspath(str(path)))
        if pending is not None and isinstance(state.get("model"), dict):
            for line in move_embedding_rows(state["model"], *pending):
                logger.info(f"{path}: {line}")
        return state

    return load_checkpoint_to_cpu


def _saved_state(filename: str) -> dict | None:
    """The checkpoint's structure (tensors mapped, not read), or None: fairseq's load then
    says why."""
    import torch

    try:
        state = torch.load(filename, map_location="cpu", mmap=True, weights_only=True)
    except Exception:
        return None
    return state if isinstance(state, dict) else None


def checked_trainer_load(original: Callable) -> Callable:
    @functools.wraps(original)
    def load_checkpoint(self, filename, reset_optimizer=False, *args, **kwargs):
        state = _saved_state(filename) if os.path.isfile(filename) else None
        changed = {}
        if state is not None:
            check_resume(self, state, filename, reset_optimizer)
            changed = changed_dictionaries(self, state, filename, reset_optimizer)
        key = os.path.abspath(filename)
        if changed:
            _PENDING_MOVES[key] = (self.get_model(), changed)
        try:
            return original(self, filename, reset_optimizer, *args, **kwargs)
        finally:
            _PENDING_MOVES.pop(key, None)

    return load_checkpoint
