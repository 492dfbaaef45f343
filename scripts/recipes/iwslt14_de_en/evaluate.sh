#!/usr/bin/env bash
# Decode IWSLT14 De-En's test set and score it.
set -euo pipefail
RECIPE_USAGE="usage: scripts/recipes/iwslt14_de_en/evaluate.sh [-h] [--dry-run] MODEL [-- FAIRSEQ_GENERATE_FLAGS...]

fairseq-generate with the paper's beam 5 and length penalty 1.1 on the test set, then
tokenized lower-cased BLEU (what the paper reports) and SacreBLEU (lower-cased, against the
untokenised references) with its signature.
Variables: SUBSET (default test), CHECKPOINT (default SAVE_DIR/checkpoint_best.pt), SAVE_DIR,
DATA_BIN, RESULTS (default SAVE_DIR/score-SUBSET.json).
Outputs: SAVE_DIR/generate-SUBSET.txt (hypotheses) and the JSON results file, also printed."
source "$(dirname "$0")/../lib/recipe.sh"

DATASET=iwslt14_de_en
GENERATE_ARGS=(--beam 5 --lenpen 1.1 --remove-bpe --batch-size 128)
SCORE_ARGS=(--metric bleu --lowercase --detok-lang en)
[[ ${SUBSET:-test} != test ]] || SCORE_ARGS+=(--references "$DATA_ROOT/iwslt14_de_en/text/test.en")
recipe_translation_evaluate_main "$@"
