#!/usr/bin/env bash
# Train a model on IWSLT14 De-En with the ReLUFormer paper's settings.
set -euo pipefail
RECIPE_USAGE="usage: scripts/recipes/iwslt14_de_en/train.sh [-h] [--dry-run] MODEL [-- FAIRSEQ_TRAIN_FLAGS...]

MODEL: transformer | relu_former | relu_former_softmax_cross | sparsemax | entmax15 | rela |
       sparse_softmax
relu_former is the paper's full-ReLU model (--attention-activation relu: ReLU in encoder and
decoder self-attention and in cross-attention); relu_former_softmax_cross is our hybrid
(softmax cross-attention), not the paper's; sparsemax, entmax15 and rela use their activation
in all three attentions, like relu_former.
Defaults are the ReLUFormer paper's IWSLT14 setting (its appendix A.2): 6+6 layers, 512/1024,
4 heads (transformer_iwslt_de_en, relu_former_iwslt_de_en), dropout 0.1 on residual
connections and on attention weights, shared source/target embeddings (one joined
dictionary), Adam (0.9, 0.98), inverse-sqrt schedule with 4000 warm-up updates, label
smoothing 0.1, 8192 tokens a batch (--max-tokens 4096 --update-freq 2 on one GPU: halve
--update-freq per doubling of GPUs), 100k updates, for every model of the comparison.
Not given by the paper, fairseq's IWSLT recipe values: lr 5e-4, weight decay 1e-4.
Flags after -- go to fairseq-train last and override these (e.g. -- --max-update 2).
--dry-run prints the fairseq-train command instead of running it.

Variables: DATA_BIN (default \$DATA_ROOT/iwslt14_de_en/data-bin), SAVE_DIR (default
\$CHECKPOINT_ROOT/iwslt14_de_en/MODEL), LAUNCHER (e.g. 'torchrun --nproc-per-node 8'),
SPARSE_K (default 20), LABEL_SMOOTHING; see scripts/recipes/lib/recipe.sh.
Output: checkpoints and train.log in SAVE_DIR."
source "$(dirname "$0")/../lib/recipe.sh"

DATASET=iwslt14_de_en
TRANSFORMER_ARCH=transformer_iwslt_de_en
RELU_FORMER_ARCH=relu_former_iwslt_de_en
recipe_translation_train_main de en 5e-4 0.0001 -- "$@"
