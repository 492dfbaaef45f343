#!/usr/bin/env bash
# Decode the Gigaword-10k headline generation test set and score it with ROUGE (see -h).
set -euo pipefail
DATASET=gigaword_10k
TASK_TITLE="Gigaword-10k headline generation"
source "$(dirname "$0")/../lib/recipe.sh"
# UniLM's Gigaword decoding: beam 5 (the paper also reports beam 1), no length normalisation,
# repeated trigrams blocked, headlines of at most 32 pieces
DECODE_SOURCE="UniLM decodes Gigaword"
DECODE_ARGS=(--beam "${BEAM:-5}" --lenpen 0 --no-repeat-ngram-size 3 --max-len-a 0
             --max-len-b 32)
SCORE_TEXT="ROUGE-1/2/L F1 (rouge-score, Porter stemmer) of the BPE-removed headlines
against the reference headlines"
SCORE_ARGS=(--metric rouge)
[[ ${SUBSET:-test} != test ]] || SCORE_ARGS+=(--references "$DATA_ROOT/$DATASET/text/test.tgt")
source "$RECIPE_COMMON/text_generation.sh"
text_generation_evaluate_main "$@"
