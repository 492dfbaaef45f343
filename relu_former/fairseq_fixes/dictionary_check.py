"""A checkpoint never loads into a model whose dictionary lists other words in its places
(fairseq checks shapes only). Saved checkpoints record their dictionaries; a difference is
refused in one line unless ``--accept-dictionary-change`` with a new optimisation: then each
word keeps its rows, moved to its index here. No probe: a check fairseq does not make."""

from __future__ import annotations

import functools
import logging
import os
from typing import Callable, Sequence

from relu_former.errors import OptionError
from relu_former.fairseq_fixes.resume_check import get_field

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
    found = {side: getattr(task, f"{side}_dictionary", None) for side in ("source", "target")}
    return {side: list(found[side].symbols) for side in found if hasattr(found[side], "symbols")}


def _dictionaries_of_data(cfg) -> dict[str, list[str]]:
    """The dictionaries of the data folder a checkpoint config was trained on, if still there."""
    from fairseq.data import Dictionary

    task = get_field(cfg, "task")
    data = get_field(task, "data")
    if not isinstance(data, str) or not data:
        return {}
    folder = data.split(os.pathsep)[0]
    found = {}
    for side in ("source", "target"):
        lang = get_field(task, f"{side}_lang")
        path = os.path.join(folder, f"dict.{lang}.txt")
        if lang and os.path.isfile(path):
            found[side] = list(Dictionary.load(path).symbols)
    return found


def checkpoint_dictionaries(state: dict) -> dict[str, list[str]]:
    """The dictionaries a loaded checkpoint was trained with: recorded, else its data's."""
    recorded = state.get(KEY)
    if recorded:
        return {side: list(symbols) for side, symbols in recorded.items()}
    return _dictionaries_of_data(state.get("cfg"))


def recording_dictionaries(original: Callable) -> Callable:
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
    same = finetune and os.path.abspath(finetune) == os.path.abspath(filename)
    return "--finetune-from-model" if same else "--restore-file"


def move_embedding_rows(weights: dict, model, dictionaries: dict) -> list[str]:
    """Rebuild each token embedding and output projection of ``weights`` for the data's words
    (``dictionaries``: side -> (checkpoint's, data's)); a new word gets ``model``'s row."""
    fresh = model.state_dict()
    done = []
    for name, _ in model.named_modules(remove_duplicate=False):  # shared tables: every name
        if name.rsplit(".", 1)[-1] not in ("embed_tokens", "output_projection"):
            continue
        side = "source" if name.split(".", 1)[0] == "encoder" else "target"
        if side not in dictionaries:
            continue
        saved, current = dictionaries[side]
        where = {symbol: index for index, symbol in enumerate(saved)}
        pairs = [(i, where[symbol]) for i, symbol in enumerate(current) if symbol in where]
        for key in (f"{name}.weight", f"{name}.bias"):
            old, new = weights.get(key), fresh.get(key)
            if old is None or new is None or old.size(0) != len(saved) or \
                    new.size(0) != len(current) or old.shape[1:] != new.shape[1:]:
                continue
            new = new.detach().clone().to(old.dtype)
            rows, from_rows = zip(*pairs) if pairs else ((), ())
            new[list(rows)] = old[list(from_rows)]
            weights[key] = new
            done.append(f"{key}: {len(pairs)} of {len(current)} words keep their rows, "
                        f"{len(current) - len(pairs)} new ones start from fresh rows")
    return done


def changed_dictionaries(trainer, state: dict, filename: str, reset_optimizer: bool) -> dict:
    """side -> (saved, current) symbols of each accepted dictionary change of ``state`` (the
    checkpoint ``filename``); ``OptionError`` for a change not accepted."""
    current = _task_dictionaries(getattr(trainer, "task", None))
    saved = checkpoint_dictionaries(state) if current else {}
    changed = {}
    for side in [side for side in ("source", "target") if side in saved and side in current]:
        difference = dictionary_difference(saved[side], current[side])
        if difference is None:
            continue
        message = (f"the {side} dictionary of the data does not match the one {filename} was "
                   f"trained with: {difference}")
        accepted = os.environ.get(ACCEPT_ENV) == "1"
        if accepted and not reset_optimizer:  # a resume keeps the old rows' optimizer moments
            raise OptionError(ACCEPT_FLAG, f"{message}; {ACCEPT_FLAG} starts a new model from "
                              "its weights, but this resume would keep its optimizer state, "
                              "whose embedding rows belong to the old dictionary: add "
                              f"--reset-optimizer, or fine-tune with --finetune-from-model "
                              f"{filename} and another --save-dir")
        if not accepted:
            also = "" if reset_optimizer else " --reset-optimizer"
            raise OptionError(_flag_of(trainer, filename), f"{message}; its embeddings would "
                              "belong to other words. Binarize the data with the checkpoint's "
                              "dictionary (fairseq-preprocess --srcdict/--tgtdict), or pass "
                              f"{ACCEPT_FLAG}{also} to start from it anyway, each word's "
                              "embedding row moved to its index here")
        logger.warning(f"{message} ({ACCEPT_FLAG}: each word's embedding row is moved to its "
                       "index here)")
        changed[side] = (saved[side], current[side])
    return changed
