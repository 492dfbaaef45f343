#!/usr/bin/env bash
# Decode the SQuAD 1.1 question generation test set and score it with BLEU (see -h).
set -euo pipefail
DATASET=squad_qg
TASK_TITLE="SQuAD 1.1 question generation"
source "$(dirname "$0")/../lib/recipe.sh"
# the paper reports question generation at beam 1; UniLM's cap of 48 target pieces
DECODE_SOURCE="the paper (beam 1) and UniLM (length cap) decode"
DECODE_ARGS=(--beam "${BEAM:-1}" --lenpen 0 --max-len-a 0 --max-len-b 48)
SCORE_TEXT="tokenized lower-cased BLEU-1..4 with every question of the same input as
a reference (multi-reference, the standard evaluation of Du et al. 2017)"
SCORE_ARGS=(--metric bleu --lowercase --bleu-orders 1 2 3 4 --multi-reference)
source "$RECIPE_COMMON/text_generation.sh"
text_generation_evaluate_main "$@"
