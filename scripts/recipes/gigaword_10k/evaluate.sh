#!/usr/bin/env bash
# Decode the Gigaword-10k headline generation test set and score it.
set -euo pipefail
RECIPE_USAGE="usage: scripts/recipes/gigaword_10k/evaluate.sh [-h] [--dry-run] MODEL [-- FAIRSEQ_GENERATE_FLAGS...]

fairseq-generate with beam BEAM (default 5; the paper also reports beam 1), BPE removed;
sparse_softmax decodes with top-k sparse-softmax keeping SPARSE_DECODE_K (default 5, the
paper's top-5 at beam 5) tokens a step. Then ROUGE-1/2/L F1 (rouge-score, stemmed) of the BPE-removed headlines against the reference headlines.
Variables: BEAM, SPARSE_DECODE_K, SUBSET, CHECKPOINT, SAVE_DIR, DATA_BIN, RESULTS.
Outputs: SAVE_DIR/generate-SUBSET.txt and the JSON results file (also printed)."
source "$(dirname "$0")/../lib/recipe.sh"

DATASET=gigaword_10k
DATA_BIN=${DATA_BIN:-$DATA_ROOT/gigaword_10k/data-bin}
RECIPE_MODELS=(transformer sparse_softmax)
GENERATE_ARGS=(--beam "${BEAM:-5}" --lenpen 1.0 --remove-bpe --truncate-source
               --max-source-positions 512 --max-target-positions 128 --batch-size 128)
SCORE_ARGS=(--metric rouge)
if [[ ${SUBSET:-test} == test ]]; then SCORE_ARGS+=(--references "$DATA_ROOT/gigaword_10k/text/test.tgt"); fi
recipe_evaluate_main "$@"
