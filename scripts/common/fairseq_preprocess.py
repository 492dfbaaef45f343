"""``fairseq-preprocess`` of a tokenised parallel corpus into a joined-dictionary data bin."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

from scripts.common.child_processes import stream
from scripts.common.fairseq_cli import fairseq_command


def preprocess(text: Path, dest: Path, env: Dict[str, str], src: str, tgt: str,
               *extra: str) -> None:
    """Binarise ``text/{train,valid,test}.{src,tgt}`` into ``dest`` (``extra``: more
    fairseq-preprocess flags); its log goes beside it.

    Exits naming the log when fairseq-preprocess fails.
    """
    command = [fairseq_command("fairseq-preprocess"), "--source-lang", src, "--target-lang", tgt,
               "--trainpref", text / "train", "--validpref", text / "valid",
               "--testpref", text / "test", "--destdir", dest, "--joined-dictionary",
               "--workers", "1", *extra]
    code, _ = stream(command, dest.parent / f"preprocess.{dest.name}.log", lambda _: None, env)
    if code:
        raise SystemExit(f"fairseq-preprocess failed; see {dest.parent}/preprocess.{dest.name}"
                         ".log")
