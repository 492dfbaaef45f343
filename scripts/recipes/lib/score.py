#!/usr/bin/env python3
"""Score a ``fairseq-generate`` output: BLEU as the papers report it plus SacreBLEU, or ROUGE.

BLEU: "tokenized BLEU" is corpus BLEU on the tokenised, BPE-removed hypotheses (``H-``) and
references (``T-``), the ``multi-bleu.perl`` number the papers print (SacreBLEU's algorithm
with ``tokenize="none"``); with ``--split-compounds`` hyphenated compounds are split first, the
WMT14 En-De convention (``get_ende_bleu.sh``). SacreBLEU is computed on detokenised
hypotheses against the untouched reference text, and its signature is reported.
``--bleu-orders 1 2 3 4`` adds BLEU-1..4 and ``--multi-reference`` scores one hypothesis per
distinct source against all of its references (question generation).
ROUGE: ROUGE-1/2/L F1 (``rouge-score``, Porter stemmer) of ``H-`` lines against the raw
references (``--references``) or the ``T-`` lines; ``--rouge-lsum`` adds ROUGE-Lsum on
sentence-split summaries. ``rouge_scores(hypotheses, references, lsum=...)`` is the importable
form (the demo scores with it too).

The scores go to ``--out`` as JSON and are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from typing import Sequence

from scripts.recipes.lib.prepare_text import moses_detokenize, read_lines
from scripts.recipes.lib.sentence_split import split_sentences

_LINE = re.compile(r"^([HTS])-(\d+)\t(.*)$")
_FAIRSEQ_BLEU = re.compile(r"BLEU4? = ([\d.]+)")


class ScoreInputError(ValueError):
    """A generate log and references that cannot be scored together (skipped sentences, line
    counts that differ); the command line prints it as one line."""


def parse_generate(lines: Sequence[str], sources: dict[int, str] | None = None
                   ) -> tuple[list[int], list[str], list[str]]:
    """Sentence ids, hypotheses and references of a fairseq-generate log, in id order.

    ``sources``, when given, receives the source line (``S-``) of each id.
    """
    hyps: dict[int, str] = {}
    refs: dict[int, str] = {}
    for line in lines:
        m = _LINE.match(line)
        if not m:
            continue
        kind, ident, rest = m.group(1), int(m.group(2)), m.group(3)
        if kind == "H":
            _, _, text = rest.partition("\t")  # H-id <tab> score <tab> text
            hyps.setdefault(ident, text)  # with --nbest > 1 the best comes first
        elif kind == "T":
            refs[ident] = rest
        elif sources is not None:
            sources[ident] = rest
    if not hyps:
        raise ScoreInputError("no H- lines: is this a fairseq-generate output?")
    ids = sorted(hyps)
    return ids, [hyps[i] for i in ids], [refs.get(i, "") for i in ids]


def split_compounds(line: str) -> str:
    """``a-b`` -> ``a ##AT##-##AT## b`` as WMT14 En-De's compound-split BLEU does."""
    return re.sub(r"(\S)-(\S)", r"\1 ##AT##-##AT## \2", line)


def group_by_source(ids: Sequence[int], hyps: Sequence[str], refs: Sequence[str],
                    sources: dict[int, str]) -> tuple[list[str], list[list[str]]]:
    """One hypothesis per distinct source and all references of that source.

    Question generation's standard evaluation (Du et al. 2017's, which UniLM and the
    sparse-softmax paper follow) scores each distinct input once against every question asked
    about it. Identical inputs decode to identical hypotheses; the first is kept.
    """
    groups: dict[str, tuple[str, list[str]]] = {}
    for ident, hyp, ref in zip(ids, hyps, refs):
        groups.setdefault(sources.get(ident, f"<no source {ident}>"), (hyp, []))[1].append(ref)
    return [g[0] for g in groups.values()], [g[1] for g in groups.values()]


def bleu_scores(hyps: Sequence[str], refs: Sequence[str] | Sequence[Sequence[str]], *,
                orders: Sequence[int] = (4,), lowercase: bool = False, compounds: bool = False
                ) -> dict[str, float]:
    """Tokenised corpus BLEU-n for each n in ``orders`` (``tokenize="none"``).

    ``refs`` holds one reference a hypothesis, or a list of references a hypothesis (any
    number each: multi-reference BLEU, clipped counts over all references and the closest
    reference length, as ``multi-bleu.perl``).
    """
    from sacrebleu.metrics import BLEU

    ref_lists = [[r] if isinstance(r, str) else list(r) for r in refs]
    if compounds:
        hyps = [split_compounds(h) for h in hyps]
        ref_lists = [[split_compounds(r) for r in rs] for rs in ref_lists]
    width = max((len(rs) for rs in ref_lists), default=1)
    # sacrebleu takes reference streams; a missing reference is None
    streams = [[rs[k] if k < len(rs) else None for rs in ref_lists] for k in range(width)]
    scores = {}
    for n in orders:
        metric = BLEU(tokenize="none", lowercase=lowercase, max_ngram_order=n, force=True)
        scores[f"bleu{n}_tokenized"] = round(metric.corpus_score(list(hyps), streams).score, 2)
    return scores


def sacrebleu_score(hyps: Sequence[str], refs: Sequence[str], *, lowercase: bool = False
                    ) -> tuple[float, str]:
    """SacreBLEU (13a tokeniser) of detokenised text and its signature."""
    from sacrebleu.metrics import BLEU

    metric = BLEU(lowercase=lowercase)
    score = metric.corpus_score(list(hyps), [list(refs)])
    return round(score.score, 2), str(metric.get_signature())


ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")


def rouge_scores(hypotheses: Sequence[str], references: Sequence[str], *, lsum: bool = False,
                 lang: str = "en") -> dict[str, float]:
    """Mean ROUGE F1 (x100) of ``hypotheses`` against ``references``, one pair a position.

    Google's ``rouge-score`` package (the Python port of ROUGE-1.5.5 that Pegasus, BigBird and
    the Pyramidion paper's baselines report) with the Porter stemmer and its default
    tokeniser (lower-cased, non-alphanumerics dropped): ROUGE-1, ROUGE-2 and ROUGE-L, the
    latter over each text as one sequence. With ``lsum`` also ROUGE-Lsum: the union-LCS of
    the texts split into sentences with the Moses splitter (``split_sentences`` in ``lang``,
    uncased: the summaries are lower-cased text), the summary-level ROUGE-L of ROUGE-1.5.5
    that long-document papers report.
    Returns ``{"rouge1": .., "rouge2": .., "rougeL": ..[, "rougeLsum": ..]}``, 2 decimals.
    """
    from rouge_score import rouge_scorer

    if len(hypotheses) != len(references):
        raise ScoreInputError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    kinds = list(ROUGE_TYPES) + (["rougeLsum"] if lsum else [])
    scorer = rouge_scorer.RougeScorer(kinds, use_stemmer=True)
    totals = dict.fromkeys(kinds, 0.0)
    for hypothesis, reference in zip(hypotheses, references):
        if lsum:
            # rougeLsum reads sentence boundaries from newlines; the others ignore them
            hypothesis = "\n".join(split_sentences(hypothesis, lang, cased=False))
            reference = "\n".join(split_sentences(reference, lang, cased=False))
        result = scorer.score(reference, hypothesis)
        for kind in kinds:
            totals[kind] += result[kind].fmeasure
    return {k: round(100 * v / max(len(hypotheses), 1), 2) for k, v in totals.items()}


def score(generate_output: Path, metric: str, *, references: Path | None = None,
          detok_lang: str | None = None, lowercase: bool = False, compounds: bool = False,
          bleu_orders: Sequence[int] = (4,), expected_sentences: int | None = None,
          rouge_lsum: bool = False, multi_reference: bool = False) -> dict:
    """All scores of one generate log, as a JSON-ready dict."""
    lines = read_lines(generate_output)
    sources: dict[int, str] = {}
    ids, hyps, refs = parse_generate(lines, sources)
    if expected_sentences is not None and len(ids) != expected_sentences:
        raise ScoreInputError(f"{generate_output} has {len(ids)} hypotheses, the subset "
                              f"{expected_sentences} sentences: sentences were skipped")
    raw_refs = None
    if references is not None:
        all_refs = read_lines(references)
        if max(ids) >= len(all_refs):
            raise ScoreInputError(f"{references} has {len(all_refs)} lines but the generate log "
                                  f"has sentence id {max(ids)}: wrong reference file?")
        if len(ids) != len(all_refs):
            raise ScoreInputError(f"the generate log {generate_output} has {len(ids)} hypotheses "
                                  f"but {references} has {len(all_refs)} references: sentences "
                                  "were skipped, or the references are of another set")
        raw_refs = [all_refs[i] for i in ids]
    result: dict = {"sentences": len(ids), "generate_output": str(generate_output)}
    fairseq_bleu = [m.group(1) for m in map(_FAIRSEQ_BLEU.search, lines) if m]
    if metric == "bleu" and multi_reference:
        grouped_hyps, grouped_refs = group_by_source(ids, hyps, refs, sources)
        result["distinct_sources"] = len(grouped_hyps)
        result.update(bleu_scores(grouped_hyps, grouped_refs, orders=bleu_orders,
                                  lowercase=lowercase, compounds=compounds))
    elif metric == "bleu":
        result.update(bleu_scores(hyps, refs, orders=bleu_orders, lowercase=lowercase,
                                  compounds=compounds))
        if fairseq_bleu:
            result["fairseq_generate_bleu4"] = float(fairseq_bleu[-1])
        if raw_refs is None and detok_lang:
            # no untokenised references (e.g. packed documents): detokenise the T- lines
            raw_refs = moses_detokenize(refs, detok_lang)
            result["sacrebleu_references"] = "detokenised T- lines"
        if raw_refs is not None:
            detok = moses_detokenize(hyps, detok_lang) if detok_lang else hyps
            result["sacrebleu"], result["sacrebleu_signature"] = sacrebleu_score(
                detok, raw_refs, lowercase=lowercase)
    elif metric == "rouge":
        result.update(rouge_scores(hyps, raw_refs if raw_refs is not None else refs,
                                   lsum=rouge_lsum))
    else:
        raise ValueError(f"--metric must be bleu or rouge, got {metric!r}")
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m scripts.recipes.lib.score",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("generate_output", type=Path, help="stdout of fairseq-generate")
    parser.add_argument("--metric", choices=["bleu", "rouge"], required=True,
                        help="BLEU (translation, question generation) or ROUGE (summaries)")
    parser.add_argument("--references", type=Path, default=None,
                        help="untokenised reference text, one line per test sentence (for "
                             "SacreBLEU; for ROUGE instead of the T- lines)")
    parser.add_argument("--detok-lang", default=None,
                        help="Moses-detokenise hypotheses in this language before SacreBLEU "
                             "(and the T- lines too when --references is not given)")
    parser.add_argument("--lowercase", action="store_true", help="case-insensitive BLEU")
    parser.add_argument("--split-compounds", action="store_true",
                        help="split hyphenated compounds before tokenized BLEU (WMT14 En-De)")
    parser.add_argument("--bleu-orders", type=int, nargs="+", default=[4],
                        help="report BLEU-n for each n (default 4)")
    parser.add_argument("--multi-reference", action="store_true",
                        help="BLEU of one hypothesis per distinct source line against all "
                             "references of that source (question generation)")
    parser.add_argument("--rouge-lsum", action="store_true",
                        help="also ROUGE-Lsum on sentence-split summaries (long documents)")
    parser.add_argument("--expected-sentences", type=int, default=None,
                        help="fail unless the log has this many hypotheses")
    parser.add_argument("--out", type=Path, required=True, help="JSON results file")
    a = parser.parse_args(argv)
    try:
        result = score(a.generate_output, a.metric, references=a.references,
                       detok_lang=a.detok_lang, lowercase=a.lowercase,
                       compounds=a.split_compounds, bleu_orders=a.bleu_orders,
                       expected_sentences=a.expected_sentences, rouge_lsum=a.rouge_lsum,
                       multi_reference=a.multi_reference)
    except ScoreInputError as error:  # no score at all rather than one of a subset
        parser.exit(1, f"{parser.prog}: error: {error}\n")
    text = json.dumps(result, indent=2)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = a.out.with_name(f".{a.out.name}.tmp{os.getpid()}")
    tmp.write_text(text + "\n")
    os.replace(tmp, a.out)
    print(text)


if __name__ == "__main__":
    main()
