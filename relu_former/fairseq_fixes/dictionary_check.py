"""A checkpoint is never loaded into a model whose dictionary lists other words in its places.

fairseq 0.12 matches a checkpoint to a model by tensor shapes only: fine-tuning on data
binarized with another dictionary of the same size (the same words in another order, say)
loads without a word, each embedding row then another word's. Here every checkpoint
fairseq-train saves records its dictionaries (``Trainer.state_dict``); before a training
loads one (``checkpoint_loading``), its dictionaries (or those of the data folder it was
trained on) are compared with the data's: a difference is refused in one line naming the flag
and the first differing index, unless ``--accept-dictionary-change`` (parsed by
``parse_checks``, passed to distributed workers in an environment variable): then each word of
both keeps its embedding and output row, moved to its index here, and a new word keeps the
model's initial row. That needs a new optimisation (``--finetune-from-model`` or
``--reset-optimizer``): the saved optimizer moments belong to the old rows. No probe: a check
fairseq does not make; matching dictionaries load unchanged.
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


def checkpoint_dictionaries(state: dict) -> dict[str, list[str]]:
    """The dictionaries a loaded checkpoint was trained with: recorded in it, else from its
    data."""
    recorded = state.get(KEY)
    if recorded:
        return {side: list(symbols) for side, symbols in recorded.items()}
    cfg = state.get("cfg")
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


def move_embedding_rows(weights: dict, model, dictionaries: dict) -> list[str]:
    """Give each word of the data its own embedding row of a checkpoint's ``weights``.

    ``dictionaries``: side -> (the checkpoint's symbols, the data's). Each token embedding
    and output projection (fairseq's ``embed_tokens`` and ``output_projection``; the encoder's
    belong to the source side, the decoder's to the target) is rebuilt at the data's size: a
    word of both dictionaries gets its row from the checkpoint, a word new to the data the row
    ``model`` was initialised with. Returns one line per table, saying what was moved.
    """
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
    """side -> (saved, current) symbols for each dictionary of ``state`` (the checkpoint
    ``filename``) that differs from the data's and is accepted; ``OptionError`` for one that is
    not."""
    current = _task_dictionaries(getattr(trainer, "task", None))
    saved = checkpoint_dictionaries(state) if current else {}
    changed = {}
    for side in ("source", "target"):
        if side not in saved or side not in current:
            continue
        difference = dictionary_difference(saved[side], current[side])
        if difference is None:
            continue
        message = (f"the {side} dictionary of the data does not match the one {filename} was "
                   f"trained with: {difference}")
        accepted = os.environ.get(ACCEPT_ENV) == "1"
        if accepted and reset_optimizer:
            logger.warning(f"{message} ({ACCEPT_FLAG}: each word's embedding row is moved to "
                           "its index here)")
            changed[side] = (saved[side], current[side])
            continue
        # a resume keeps the saved optimizer state: its moments of the embeddings are rows
        # of the old dictionary
        if accepted:
            raise OptionError(ACCEPT_FLAG, f"{message}; {ACCEPT_FLAG} starts a new model from "
                              "its weights, but this resume would keep its optimizer state, "
                              "whose embedding rows belong to the old dictionary: add "
                              f"--reset-optimizer, or fine-tune with --finetune-from-model "
                              f"{filename} and another --save-dir")
        also = "" if reset_optimizer else " --reset-optimizer"
        raise OptionError(_flag_of(trainer, filename), f"{message}; its embeddings would "
                          "belong to other words. Binarize the data with the checkpoint's "
                          "dictionary (fairseq-preprocess --srcdict/--tgtdict), or pass "
                          f"{ACCEPT_FLAG}{also} to start from it anyway, each word's embedding "
                          "row moved to its index here")
    return changed


def record_dictionaries() -> None:
    """Make every checkpoint fairseq-train saves record its dictionaries (idempotent)."""
    from fairseq.trainer import Trainer

    wrap_once(Trainer, "state_dict", _recording)
