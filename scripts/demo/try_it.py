"""The report's last section: commands to try each trained model on one's own text.

Every command pipes a line through the same preparation as the demo's training data and
then into ``fairseq-interactive`` with the demo's tokenizer and subword model, so that what
the model sees looks like what it was trained on:

- translation: the corpus is **lower-cased** (``scripts/demo/demo.py``'s ``prepare``), so the
  line is lower-cased first; fairseq then applies the Moses tokenizer with the demo's options
  (no aggressive dash splits, XML escapes) and the demo's BPE codes. Without the lower-casing
  a capitalised word is out of the vocabulary: "Die Datei ..." comes out as ``<unk> ie ...``.
- summarization: the pages were lower-cased and their whitespace collapsed
  (``scripts/demo/manpage_corpus.py``), so the line is too; fairseq applies the demo's
  SentencePiece model and ``--truncate-source`` cuts a long text to the model's input length.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any, List, Sequence

from scripts.common.fairseq_cli import fairseq_command
from scripts.common.repo_paths import USER_DIR
from scripts.common.run_record import Run

EXAMPLE_SENTENCE = "Die Datei konnte nicht geöffnet werden."
EXAMPLE_PAGE = ("SYNOPSIS: rot13 [FILE]... DESCRIPTION: rot13 reads each FILE, or the "
                "standard input, and writes its text with every letter rotated by 13 places.")
# lower-case (and, for pages, collapse whitespace) the way the demo's corpora were prepared
LOWERCASE = "import sys; [print(line.lower().strip()) for line in sys.stdin]"
LOWERCASE_COLLAPSE = 'import sys; [print(" ".join(line.lower().split())) for line in sys.stdin]'


def translation_command(data_bin: Path, checkpoint: Path, bpe_codes: Path, user_dir: str,
                        beam: int, extra: Sequence[str] = (),
                        sentence: str = EXAMPLE_SENTENCE) -> str:
    """A shell line translating ``sentence`` (German) with one demo translation model."""
    interactive = [fairseq_command("fairseq-interactive"), str(data_bin), "--user-dir",
                   user_dir, "--path", str(checkpoint), "--source-lang", "de",
                   "--target-lang", "en", "--tokenizer", "moses", "--moses-no-dash-splits",
                   "--bpe", "subword_nmt", "--bpe-codes", str(bpe_codes), "--beam", str(beam),
                   "--cpu", *extra]
    return " | ".join([f"echo {shlex.quote(sentence)}",
                       f"{shlex.quote(sys.executable)} -c {shlex.quote(LOWERCASE)}",
                       shlex.join(interactive)])


def summary_command(data_bin: Path, checkpoint: Path, spm_model: Path, user_dir: str,
                    beam: int, max_len: int, page: str = EXAMPLE_PAGE) -> str:
    """A shell line summarising ``page`` (one line of text) with one demo summary model."""
    interactive = [fairseq_command("fairseq-interactive"), str(data_bin), "--user-dir",
                   user_dir, "--path", str(checkpoint), "--source-lang", "doc",
                   "--target-lang", "sum", "--bpe", "sentencepiece", "--sentencepiece-model",
                   str(spm_model), "--truncate-source", "--beam", str(beam), "--max-len-a",
                   "0", "--max-len-b", str(max_len), "--cpu"]
    return " | ".join([f"echo {shlex.quote(page)}",
                       f"{shlex.quote(sys.executable)} -c {shlex.quote(LOWERCASE_COLLAPSE)}",
                       shlex.join(interactive)])


def try_it_section(commands: Sequence[tuple[str, str]]) -> str:
    """The report section: ``(model label, shell line)`` pairs, one code block each."""
    if not commands:
        return ""
    parts: List[str] = [
        "## Try the models on your own text\n",
        "Each line below runs `fairseq-interactive` with the demo's tokenizer and subword "
        "model; replace the quoted text with your own. The demo's corpora are **lower-cased**, "
        "so each command lower-cases its input first (typed as is, \"Die Datei ...\" would "
        "start with `<unk>`: capitalised words are not in the vocabulary). The `H-` line is "
        "the model's output, the `S-` line what the model saw.\n",
    ]
    for label, command in commands:
        parts.append(f"{label}:\n\n```sh\n{command}\n```\n")
    return "\n".join(parts)


def try_commands(runs: Sequence[Run], work: Path, beam: int, max_len: int) -> List[tuple]:
    """``(label, shell line)`` for every trained run of a demo work folder."""
    commands = []
    for run in runs:
        checkpoint = work / run.key / "checkpoint_last.pt"
        if run.data == "summaries":
            command = summary_command(work / "bin" / "summaries", checkpoint,
                                      work / "prep" / "summaries" / "spm.model", USER_DIR,
                                      beam, max_len)
        else:
            command = translation_command(work / "bin" / "sentences", checkpoint,
                                          work / "prep" / "bpe.codes", USER_DIR, beam,
                                          run.generate_flags)
        commands.append((run.label, command))
    return commands


def try_it_report(runs: Sequence[Run], work: Path, scale: Any) -> str:
    """The section for a demo scale (its ``beam`` and ``summary.target_tokens``)."""
    return try_it_section(try_commands(runs, work, scale.beam, scale.summary.target_tokens))
