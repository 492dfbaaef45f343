#!/usr/bin/env bash
# Train a sequence-to-sequence model on Gigaword-10k headline generation (see -h).
set -euo pipefail
DATASET=gigaword_10k
TASK_TITLE="Gigaword-10k headline generation"
source "$(dirname "$0")/../lib/recipe.sh"
source "$RECIPE_COMMON/text_generation.sh"
text_generation_train_main "$@"
