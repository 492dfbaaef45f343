#!/usr/bin/env bash
# Train a document-level model on Europarl7 En-De segments of SEGMENT_LENGTH tokens.
set -euo pipefail
RECIPE_USAGE="usage: SEGMENT_LENGTH=L scripts/recipes/europarl7_doc/train.sh [-h] [--dry-run] MODEL [-- FAIRSEQ_TRAIN_FLAGS...]

MODEL: transformer | relu_former | sparsemax | entmax15 | rela
SEGMENT_LENGTH: 128, 256, 512, 1024 (default) or 2048, as prepared (the paper's ReLUFormer
gains grow from 512 tokens on; it reports that sparsemax fails to converge on long inputs).
Defaults: relu_former_doc (ReLU-family models) / transformer_wmt_en_de (512/2048, 8 heads),
positions for SEGMENT_LENGTH tokens, and the paper's appendix A.2 settings: dropout 0.1 on
residual connections and on attention weights, shared source/target embeddings, Adam
(0.9, 0.98), inverse-sqrt with 4000 warm-up updates, label smoothing 0.1, 8192 tokens a batch
(--max-tokens 4096 --update-freq 2), 100k updates, for every model of the comparison.
Not given by the paper: lr 5e-4 (G-Transformer's Europarl value).
Flags after -- go to fairseq-train last; --dry-run prints the command.
Variables: SEGMENT_LENGTH, DATA_BIN (default \$DATA_ROOT/europarl7_doc/data-bin/seg<L>),
SAVE_DIR (default \$CHECKPOINT_ROOT/europarl7_doc/seg<L>/MODEL), LAUNCHER, LABEL_SMOOTHING.
Output: checkpoints and train.log in SAVE_DIR."
source "$(dirname "$0")/../lib/recipe.sh"

L=${SEGMENT_LENGTH:-1024}
DATASET=europarl7_doc/seg$L
DATA_BIN=${DATA_BIN:-$DATA_ROOT/europarl7_doc/data-bin/seg$L}
RECIPE_MODELS=(transformer relu_former sparsemax entmax15 rela)
TRANSFORMER_ARCH=transformer_wmt_en_de
RELU_FORMER_ARCH=relu_former_doc
POSITIONS=$((L + 1 > 1024 ? L + 1 : 1024))  # + 1: the end-of-sentence token
recipe_translation_train_main en de 5e-4 0.0 \
    --max-source-positions "$POSITIONS" --max-target-positions "$POSITIONS" -- "$@"
