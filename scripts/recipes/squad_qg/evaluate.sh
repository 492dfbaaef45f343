#!/usr/bin/env bash
# Decode the SQuAD 1.1 question generation test set and score it.
set -euo pipefail
RECIPE_USAGE="usage: scripts/recipes/squad_qg/evaluate.sh [-h] [--dry-run] MODEL [-- FAIRSEQ_GENERATE_FLAGS...]

fairseq-generate with beam BEAM (default 5; the paper also reports beam 1), BPE removed;
sparse_softmax decodes with top-k sparse-softmax keeping SPARSE_DECODE_K (default 5, the
paper's top-5 at beam 5) tokens a step. Then tokenized lower-cased BLEU-1, -2, -3 and -4 (the paper's table) of the BPE-removed questions.
Variables: BEAM, SPARSE_DECODE_K, SUBSET, CHECKPOINT, SAVE_DIR, DATA_BIN, RESULTS.
Outputs: SAVE_DIR/generate-SUBSET.txt and the JSON results file (also printed)."
source "$(dirname "$0")/../lib/recipe.sh"

DATASET=squad_qg
DATA_BIN=${DATA_BIN:-$DATA_ROOT/squad_qg/data-bin}
RECIPE_MODELS=(transformer sparse_softmax)
GENERATE_ARGS=(--beam "${BEAM:-5}" --lenpen 1.0 --remove-bpe --truncate-source
               --max-source-positions 512 --max-target-positions 128 --batch-size 128)
SCORE_ARGS=(--metric bleu --lowercase --bleu-orders 1 2 3 4)
recipe_evaluate_main "$@"
