"""A checkpoint is never loaded into a model whose dictionary lists other words in its places.

fairseq-fixed 0.12.3.1 (as every fairseq 0.12) matches a checkpoint to a model by tensor shapes
only. Fine-tuning (``--finetune-from-model``, ``--restore-file``) on data binarized with
another dictionary of the same size, the same words in another order say, loads without a word,
and every embedding row then belongs to another word: the run trains from a scrambled start and
nothing says so.

With the plugin loaded:

- every checkpoint fairseq-train saves records its task's source and target dictionaries (the
  symbol lists, under ``relu_former_dictionaries``);
- before ``Trainer.load_checkpoint`` loads one, the recorded dictionaries (or, for a
  checkpoint saved without the plugin, the ``dict.*.txt`` files of the data folder it was
  trained on, when they still exist) are compared with the task's: any difference, another
  order included, stops the run with one line naming the flag, the first differing index and
  ``--accept-dictionary-change``, the flag that loads it anyway (with a warning).

fairseq offers no hook for either, so the plugin wraps ``Trainer.state_dict`` and
``Trainer.load_checkpoint`` (same signatures, marked, so installing twice is harmless); the
flag is added to the parser by :mod:`relu_former.fairseq_fixes.parse_checks`, which passes it
on in an environment variable so that spawned distributed workers see it too. There is no
probe: this is a check fairseq does not make, and matching dictionaries load unchanged.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Callable, Sequence

from relu_former.errors import OptionError
from relu_former.fairseq_fixes.wrap_once import wrap_once

logger = logging.getLogger(__name__)

KEY = "relu_former_dictionaries"
ACCEPT_FLAG = "--accept-dictionary-change"
ACCEPT_ENV = "RELU_FORMER_ACCEPT_DICTIONARY_CHANGE"


def dictionary_difference(saved: Sequence[str], current: Sequence[str]) -> str | None:
    """How ``current`` differs from ``saved`` (symbol lists, index = embedding row), or None."""
    if list(saved) == list(current):
        return None
    if len(saved) != len(current):
        return f"it has {len(current)} symbols, the checkpoint's has {len(saved)}"
    moved = [i for i, (a, b) in enumerate(zip(saved, current)) if a != b]
    first = moved[0]
    kind = ("the same symbols in another order" if sorted(saved) == sorted(current)
            else "other symbols")
    return (f"it holds {kind}: {len(moved)} of {len(saved)} indices differ (index {first} is "
            f"{saved[first]!r} in the checkpoint, {current[first]!r} here)")


def _task_dictionaries(task) -> dict[str, list[str]]:
    found = {}
    for side in ("source", "target"):
        dictionary = getattr(task, f"{side}_dictionary", None)
        if dictionary is not None and hasattr(dictionary, "symbols"):
            found[side] = list(dictionary.symbols)
    return found


def _dictionaries_of_data(cfg) -> dict[str, list[str]]:
    """The dictionaries of the data folder a checkpoint config was trained on, if still there."""
    from fairseq.data import Dictionary

    task = cfg.get("task") if isinstance(cfg, dict) else getattr(cfg, "task", None)
    if task is None:
        return {}

    def get(name):
        return task.get(name) if isinstance(task, dict) else getattr(task, name, None)

    data = get("data")
    if not isinstance(data, str) or not data:
        return {}
    folder = data.split(os.pathsep)[0]
    found = {}
    for side, lang in (("source", get("source_lang")), ("target", get("target_lang"))):
        path = os.path.join(folder, f"dict.{lang}.txt")
        if lang and os.path.isfile(path):
            found[side] = list(Dictionary.load(path).symbols)
    return found


def checkpoint_dictionaries(path: str) -> dict[str, list[str]]:
    """The dictionaries a checkpoint was trained with: recorded in it, else from its data."""
    import torch

    # mmap: the tensors are not read, only the pickled structure
    state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    recorded = state.get(KEY) if isinstance(state, dict) else None
    if recorded:
        return {side: list(symbols) for side, symbols in recorded.items()}
    cfg = state.get("cfg") if isinstance(state, dict) else None
    return _dictionaries_of_data(cfg) if cfg is not None else {}


def _recording(original: Callable) -> Callable:
    @functools.wraps(original)
    def state_dict(self):
        state = original(self)
        dictionaries = _task_dictionaries(getattr(self, "task", None))
        if dictionaries:
            state[KEY] = dictionaries
        return state

    return state_dict


def _flag_of(trainer, filename: str) -> str:
    finetune = getattr(getattr(trainer.cfg, "checkpoint", None), "finetune_from_model", None)
    if finetune and os.path.abspath(finetune) == os.path.abspath(filename):
        return "--finetune-from-model"
    return "--restore-file"


def _comparing(original: Callable) -> Callable:
    @functools.wraps(original)
    def load_checkpoint(self, filename, *args, **kwargs):
        if os.path.isfile(filename):
            current = _task_dictionaries(getattr(self, "task", None))
            try:
                saved = checkpoint_dictionaries(filename) if current else {}
            except Exception:  # unreadable: the load itself reports it, naming the file
                saved = {}
            for side in ("source", "target"):
                if side not in saved or side not in current:
                    continue
                difference = dictionary_difference(saved[side], current[side])
                if difference is None:
                    continue
                message = (f"the {side} dictionary of the data does not match the one "
                           f"{filename} was trained with: {difference}; its embeddings would "
                           "belong to other words")
                if os.environ.get(ACCEPT_ENV) == "1":
                    logger.warning(f"{message} (loaded anyway: {ACCEPT_FLAG})")
                    continue
                flag = _flag_of(self, filename)
                raise OptionError(flag, f"{message}. Binarize the data with the checkpoint's "
                                  f"dictionary (fairseq-preprocess --srcdict/--tgtdict), or pass "
                                  f"{ACCEPT_FLAG} to load it anyway")
        return original(self, filename, *args, **kwargs)

    return load_checkpoint



def check_checkpoint_dictionaries() -> None:
    """Install the recording and the comparison on fairseq's ``Trainer`` (idempotent)."""
    from fairseq.trainer import Trainer

    wrap_once(Trainer, "state_dict", _recording)
    wrap_once(Trainer, "load_checkpoint", _comparing)
