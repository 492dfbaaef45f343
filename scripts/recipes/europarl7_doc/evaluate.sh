#!/usr/bin/env bash
# Decode the Europarl7 document test segments and score them.
set -euo pipefail
RECIPE_USAGE="usage: SEGMENT_LENGTH=L scripts/recipes/europarl7_doc/evaluate.sh [-h] [--dry-run] MODEL [-- FAIRSEQ_GENERATE_FLAGS...]

fairseq-generate with G-Transformer's Europarl decoding (beam 5, length penalty 1.0, output
length <= 1.2 x source + 10; the ReLUFormer paper states none for Europarl) on the test segments, then tokenized BLEU over segments and SacreBLEU on
the Moses-detokenised hypotheses and references, with its signature.
Variables: SEGMENT_LENGTH (default 1024), SUBSET, CHECKPOINT, SAVE_DIR, DATA_BIN, RESULTS.
Outputs: SAVE_DIR/generate-SUBSET.txt and the JSON results file (also printed)."
source "$(dirname "$0")/../lib/recipe.sh"

L=${SEGMENT_LENGTH:-1024}
DATASET=europarl7_doc/seg$L
DATA_BIN=${DATA_BIN:-$DATA_ROOT/europarl7_doc/data-bin/seg$L}
RECIPE_MODELS=(transformer relu_former relu_former_softmax_cross sparsemax entmax15 rela)
POSITIONS=$((L + 1 > 1024 ? L + 1 : 1024))
GENERATE_ARGS=(--beam 5 --lenpen 1.0 --max-len-a 1.2 --max-len-b 10 --remove-bpe
               --max-source-positions "$POSITIONS" --max-target-positions "$POSITIONS"
               --max-tokens 8192)
SCORE_ARGS=(--metric bleu --detok-lang de)
recipe_translation_evaluate_main "$@"
