#!/usr/bin/env bash
# Summarize the arXiv or PubMed test articles and score them with ROUGE.
set -euo pipefail
RECIPE_USAGE="usage: DATASET=arxiv|pubmed scripts/recipes/long_doc_summarization/evaluate.sh [-h] [--dry-run] MODEL [-- FAIRSEQ_GENERATE_FLAGS...]

fairseq-generate with the Pyramidion paper's beam 16 and minimum length 72 (summaries of at
most 512 pieces), SentencePiece removed, then ROUGE-1/2/L F1 (rouge-score, stemmed) against
the untokenised reference abstracts, and ROUGE-Lsum on summaries split into sentences.
Variables: DATASET (required), SUBSET, CHECKPOINT, SAVE_DIR, DATA_BIN, RESULTS.
Outputs: SAVE_DIR/generate-SUBSET.txt and the JSON results file (also printed)."
source "$(dirname "$0")/../lib/recipe.sh"
recipe_handle_help "$@"

[[ ${DATASET:-} == arxiv || ${DATASET:-} == pubmed ]] || \
    recipe_die "set DATASET=arxiv or DATASET=pubmed (got '${DATASET:-}')" 2
DATA_BIN=${DATA_BIN:-$DATA_ROOT/$DATASET/data-bin}
RECIPE_MODELS=(transformer vanilla blockwise transpooler transpooler_4x pyramidion
               deep_pyramidion)
GENERATE_ARGS=(--beam 16 --min-len 72 --max-len-a 0 --max-len-b "${MAX_TARGET_TOKENS:-512}"
               --post-process sentencepiece --max-source-positions "${MAX_SOURCE_TOKENS:-8192}"
               --max-target-positions "${MAX_TARGET_TOKENS:-512}" --batch-size 8)
SCORE_ARGS=(--metric rouge --rouge-lsum)
if [[ ${SUBSET:-test} == test ]]; then SCORE_ARGS+=(--references "$DATA_ROOT/$DATASET/text/test.tgt"); fi
recipe_evaluate_main "$@"
