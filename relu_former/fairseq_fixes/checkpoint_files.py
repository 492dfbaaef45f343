"""Checkpoint files that stay whole: atomic copies to ``checkpoint_last.pt`` (fairseq copies in
place: a kill mid-copy cut it), where the probe :func:`copies_in_place` shows the fault; a
resume past a damaged or missing ``checkpoint_last.pt`` from the newest intact checkpoint, never
from update 0 over ``checkpoint_best.pt``; no ``.tmp`` left by a failed save. No probe for
these two: their fault is in the files, which each call checks."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import glob
import logging
import os
import pickle
import re
import tempfile
import zipfile
from typing import Callable

from relu_former import errors
from relu_former.atomic_files import copy_atomic
from relu_former.errors import CorruptCheckpointError

logger = logging.getLogger(__name__)

LAST = "checkpoint_last.pt"
_ZIP_MAGIC = b"PK\x03\x04"
_PICKLE_PROTOCOL_2 = b"\x80\x02"


def is_local(path: str) -> bool:
    return "://" not in str(path)


def checkpoint_problem(path: str) -> str | None:
    """What is wrong with the checkpoint file ``path`` (a zip archive: a cut one lacks its end,
    a damaged one fails a CRC), or None (torch's pre-1.6 format has no CRC: passed)."""
    size = os.path.getsize(path)
    if size == 0:
        return "the file is empty (0 bytes)"
    with open(path, "rb") as handle:
        head = handle.read(4)
    if head.startswith(_PICKLE_PROTOCOL_2):
        return None
    if head != _ZIP_MAGIC:
        return (f"it is not a torch checkpoint ({size} bytes that do not start like one: a "
                "torch checkpoint is a zip archive)")
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except (zipfile.BadZipFile, EOFError, OSError):
        return (f"it is truncated ({size} bytes, the end of the archive is missing): it was "
                "probably cut short while being written")
    if damaged is not None:
        return f"its member {damaged} fails its checksum (the file is damaged)"
    return None


def newest_intact_checkpoint(save_dir: str, exclude: str) -> str | None:
    """The most recently written whole ``checkpoint*.pt`` of ``save_dir`` other than ``exclude``."""
    candidates = sorted((p for p in glob.glob(os.path.join(save_dir, "checkpoint*.pt"))
                         if os.path.abspath(p) != os.path.abspath(exclude)),
                        key=os.path.getmtime, reverse=True)
    return next((path for path in candidates if checkpoint_problem(path) is None), None)


def _with_restore_file(cfg, path: str):
    """A copy of the checkpoint config that restores ``path`` (and fine-tunes nothing)."""
    if dataclasses.is_dataclass(cfg):
        return dataclasses.replace(cfg, restore_file=path, finetune_from_model=None)
    from omegaconf import OmegaConf, open_dict

    cfg = copy.deepcopy(cfg)
    OmegaConf.set_readonly(cfg, False)
    with open_dict(cfg):
        cfg.restore_file = path
        # fairseq refuses --finetune-from-model beside a non-default --restore-file
        cfg.finetune_from_model = None
    return cfg


def _remove_interrupted_copies(save_dir: str) -> None:
    """Delete what copies (ours) and saves (fairseq's) killed midway left."""
    for path in (glob.glob(os.path.join(save_dir, ".checkpoint*.pt.*.tmp"))
                 + glob.glob(os.path.join(save_dir, "checkpoint*.pt.tmp"))):
        logger.info(f"removing {path}, left by a copy or save that was interrupted")
        with contextlib.suppress(FileNotFoundError):  # another rank removed it first
            os.unlink(path)


def copies_in_place(path_manager) -> bool:
    """Probe: whether ``path_manager.copy`` rewrites a file in place (its inode kept), as
    fairseq's ``shutil.copyfile`` does."""
    with tempfile.TemporaryDirectory() as folder:
        src, dst = os.path.join(folder, "src"), os.path.join(folder, "dst")
        for path in (src, dst):
            open(path, "w").close()
        inode = os.stat(dst).st_ino
        path_manager.copy(src, dst, overwrite=True)
        return os.stat(dst).st_ino == inode


def install_atomic_copy(checkpoint_utils) -> None:
    """Replace ``checkpoint_utils.PathManager`` by one whose local copies are atomic."""
    base = checkpoint_utils.PathManager
    if not copies_in_place(base):  # this fairseq's copy is atomic, or ours is installed
        return

    class AtomicCopyPathManager(base):
        @staticmethod
        def copy(src_path: str, dst_path: str, overwrite: bool = False) -> bool:
            if not (is_local(src_path) and is_local(dst_path)):
                return base.copy(src_path, dst_path, overwrite=overwrite)
            if os.path.exists(dst_path) and not overwrite:
                return False
            copy_atomic(src_path, dst_path)
            return True

    checkpoint_utils.PathManager = AtomicCopyPathManager


def refused_global(error: BaseException) -> str | None:
    """What the ``weights_only`` unpickler refused, from its error; None for another error."""
    text = str(error)
    if not isinstance(error, pickle.UnpicklingError) or "weights_only" not in text.lower() \
            and "Weights only load failed" not in text:
        return None
    match = re.search(r"[Uu]nsupported (?:GLOBAL|global:?)\s+(?:GLOBAL\s+)?([\w.]+)", text)
    return f"the global {match.group(1)}" if match else "an object the safe loader does not allow"


def removing_failed_save(original: Callable) -> Callable:
    @functools.wraps(original)
    def torch_persistent_save(obj, filename, async_write: bool = False):
        try:
            saved = original(obj, filename, async_write=async_write)
        except BaseException:
            tmp = f"{filename}.tmp"
            if is_local(tmp) and os.path.exists(tmp):
                os.unlink(tmp)
                logger.warning(f"saving {filename} failed: removed the partial {tmp}")
            raise
        errors.FILES["saved"] = str(filename)  # named if the run is interrupted later
        return saved

    return torch_persistent_save


def _resume_instead(cfg, last: str) -> str | None:
    """The checkpoint to resume from when ``last`` is missing or damaged; None: load as asked."""
    if not os.path.isfile(last):
        # fine-tuning starts from its model when there is no last checkpoint, as in fairseq
        if cfg.finetune_from_model is not None or not os.path.isdir(cfg.save_dir):
            return None
        fallback = newest_intact_checkpoint(cfg.save_dir, exclude=last)
        if fallback is not None:  # from update 0, its first validation would replace the best
            logger.warning(f"{last} is missing but {cfg.save_dir} holds other checkpoints: "
                           f"resuming from {fallback}, the newest intact one (to train from "
                           "the start, use an empty --save-dir)")
        return fallback
    problem = checkpoint_problem(last)
    if problem is None:
        return None
    fallback = newest_intact_checkpoint(cfg.save_dir, exclude=last)
    if fallback is None:
        raise CorruptCheckpointError(
            last, f"{problem}; no other intact checkpoint*.pt in {cfg.save_dir} to resume "
                  f"from: move {LAST} away to train from the start")
    logger.warning(f"{last} is corrupt: {problem}; resuming from {fallback}, the newest "
                   "intact checkpoint, instead")
    return fallback


def skipping_damaged_last(original: Callable) -> Callable:
    @functools.wraps(original)
    def load_checkpoint(cfg, trainer, **passthrough_args):
        last = os.path.join(cfg.save_dir, LAST)
        # only the default resume (a named file loads as named) of an unsharded model
        if (cfg.restore_file == LAST and getattr(trainer, "checkpoint_suffix", "") == ""
                and is_local(last)):
            _remove_interrupted_copies(cfg.save_dir)
            fallback = _resume_instead(cfg, last)
            if fallback is not None:
                cfg = _with_restore_file(cfg, os.path.abspath(fallback))
        return original(cfg, trainer, **passthrough_args)

    return load_checkpoint
