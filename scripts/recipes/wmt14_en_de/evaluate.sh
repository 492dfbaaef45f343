#!/usr/bin/env bash
# Decode newstest2014 and score it.
set -euo pipefail
RECIPE_USAGE="usage: scripts/recipes/wmt14_en_de/evaluate.sh [-h] [--dry-run] MODEL [-- FAIRSEQ_GENERATE_FLAGS...]

fairseq-generate with the paper's beam 5 and length penalty 0.6, then tokenized BLEU with
compound splitting (the WMT14 En-De number papers report) and SacreBLEU against the
untokenised newstest2014 references, with its signature.
Variables: SUBSET (default test), CHECKPOINT, SAVE_DIR, DATA_BIN, RESULTS.
Outputs: SAVE_DIR/generate-SUBSET.txt and the JSON results file (also printed)."
source "$(dirname "$0")/../lib/recipe.sh"

DATASET=wmt14_en_de
GENERATE_ARGS=(--beam 5 --lenpen 0.6 --remove-bpe --batch-size 128)
SCORE_ARGS=(--metric bleu --split-compounds --detok-lang de)
[[ ${SUBSET:-test} != test ]] || SCORE_ARGS+=(--references "$DATA_ROOT/wmt14_en_de/text/test.de")
recipe_translation_evaluate_main "$@"
