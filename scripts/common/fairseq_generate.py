"""Decoding a trained :class:`~scripts.common.run_record.Run` with the real ``fairseq-generate``.

The checkpoint is reloaded from disk, as a user would decode it. :func:`generate` returns the
hypotheses in test-set order and records fairseq's own decoding time and tokenised BLEU;
:func:`translate_and_score` adds sacreBLEU on detokenised text for the translation corpus of
:mod:`scripts.common.translation_data`.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Dict, List, Sequence

from scripts.common.child_processes import child_env, stream
from scripts.common.fairseq_cli import fairseq_command
from scripts.common.parallel_runs import threads_per_job
from scripts.common.repo_paths import USER_DIR
from scripts.common.run_record import Run
from scripts.common.translation_data import SRC, TGT
from scripts.recipes.lib.prepare_text import moses_detokenize, read_lines, write_lines

_TRANSLATED = re.compile(r"Translated [\d,]+ sentences \([\d,]+ tokens\) in ([\d.]+)s")
_HYPOTHESIS = re.compile(r"^H-(\d+)\t\S+\t(.*)$")
_BLEU = re.compile(r"BLEU4? = ([\d.]+)")


def generate(run: Run, data_bin: Path, work: Path, beam: int, decode_flags: Sequence[str],
             n_test: int, args: argparse.Namespace, position: int = 0) -> List[str]:
    """Decode the test split of ``data_bin`` with ``work/run.key/checkpoint_last.pt``.

    Returns the ``n_test`` hypotheses in order ("" for one fairseq skipped); sets
    ``run.tok_bleu`` and ``run.decode_seconds``. Raises ``RuntimeError`` with the log's tail
    when fairseq fails.
    """
    from tqdm import tqdm

    command = [
        fairseq_command("fairseq-generate"), data_bin, "--user-dir", USER_DIR,
        "--path", work / run.key / "checkpoint_last.pt", "--gen-subset", "test",
        "--beam", str(beam), *decode_flags, "--cpu",
        "--num-workers", "0", "--required-batch-size-multiple", "1",
        "--skip-invalid-size-inputs-valid-test", *run.generate_flags,
    ]
    hypotheses: Dict[int, str] = {}
    bar = tqdm(total=n_test, desc=f"decode {run.key:<15}", unit="sent", leave=True,
               disable=args.quiet, dynamic_ncols=True, mininterval=1.0, position=position)

    def on_line(line: str) -> None:
        if match := _HYPOTHESIS.match(line):
            hypotheses[int(match.group(1))] = match.group(2)
            bar.update(1)
        if match := _BLEU.search(line):
            run.tok_bleu = float(match.group(1))
        if match := _TRANSLATED.search(line):
            run.decode_seconds = float(match.group(1))

    code, _ = stream(command, work / run.key / "generate.log", on_line,
                     child_env(threads_per_job(args)))
    bar.close()
    if code != 0:
        tail = (work / run.key / "generate.log").read_text()[-3000:]
        raise RuntimeError(f"fairseq-generate failed for {run.key} (exit {code}):\n{tail}")
    return [hypotheses.get(i, "") for i in range(n_test)]


def translate_and_score(run: Run, data_bin: Path, work: Path, beam: int,
                        args: argparse.Namespace, position: int = 0) -> None:
    """Decode the translation corpus's test split; sacreBLEU and fairseq's BLEU into ``run``.

    sacreBLEU scores the detokenised output against the untouched references in
    ``work/raw``, case-insensitively (the models see lower-cased text).
    """
    n_test = len(read_lines(work / "prep" / run.data / f"test.{SRC}"))
    ordered = generate(run, data_bin, work, beam, ["--remove-bpe", "--max-tokens", "6000"],
                       n_test, args, position)
    detok = moses_detokenize(ordered, TGT)
    write_lines(work / run.key / "test.hyp.detok", detok)
    run.bleu = sacre_bleu(detok, read_lines(work / "raw" / f"test.{TGT}"))


def sacre_bleu(detokenised: Sequence[str], references: Sequence[str]) -> float:
    """sacreBLEU of detokenised output against the untouched references, case-insensitive
    (the models see lower-cased text): the demo's and the ablations' ``BLEU``."""
    import sacrebleu

    return sacrebleu.corpus_bleu(list(detokenised), [list(references)], lowercase=True).score
