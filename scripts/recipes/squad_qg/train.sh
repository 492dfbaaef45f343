#!/usr/bin/env bash
# Train a sequence-to-sequence model on SQuAD 1.1 question generation (see -h).
set -euo pipefail
DATASET=squad_qg
TASK_TITLE="SQuAD 1.1 question generation"
source "$(dirname "$0")/../lib/recipe.sh"
source "$RECIPE_COMMON/text_generation.sh"
text_generation_train_main "$@"
