#!/usr/bin/env bash
# Train a model on WMT14 En-De with the ReLUFormer paper's settings.
set -euo pipefail
RECIPE_USAGE="usage: scripts/recipes/wmt14_en_de/train.sh [-h] [--dry-run] MODEL [-- FAIRSEQ_TRAIN_FLAGS...]

MODEL: transformer | relu_former | relu_former_softmax_cross | sparsemax | entmax15 | rela |
       sparse_softmax
relu_former: the paper's full-ReLU model (ReLU in all three attentions);
relu_former_softmax_cross: our hybrid with softmax cross-attention (not the paper's).
Defaults are the ReLUFormer paper's WMT14 setting (its appendix A.2): 6+6 layers, 512/2048,
8 heads (transformer_wmt_en_de, relu_former_wmt_en_de), dropout 0.1 on residual connections
and on attention weights, shared source/target embeddings (one joined dictionary), Adam
(0.9, 0.98), inverse-sqrt schedule with 4000 warm-up updates, label smoothing 0.1, 8192
tokens a batch (--max-tokens 4096 --update-freq 2 on one GPU), 100k updates, for every model
of the comparison. Not given by the paper (fairseq's WMT recipe value): lr 7e-4.
Flags after -- go to fairseq-train last and override these; --dry-run prints the command.
Variables: DATA_BIN, SAVE_DIR, LAUNCHER, SPARSE_K (default 20), LABEL_SMOOTHING (scripts/recipes/lib/recipe.sh).
Output: checkpoints and train.log in SAVE_DIR (default \$CHECKPOINT_ROOT/wmt14_en_de/MODEL)."
source "$(dirname "$0")/../lib/recipe.sh"

DATASET=wmt14_en_de
TRANSFORMER_ARCH=transformer_wmt_en_de
RELU_FORMER_ARCH=relu_former_wmt_en_de
recipe_translation_train_main en de 7e-4 0.0 -- "$@"
