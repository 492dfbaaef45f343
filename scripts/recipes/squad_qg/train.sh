#!/usr/bin/env bash
# Train a sequence-to-sequence model on SQuAD 1.1 question generation.
set -euo pipefail
RECIPE_USAGE="usage: scripts/recipes/squad_qg/train.sh [-h] [--dry-run] MODEL [-- FAIRSEQ_TRAIN_FLAGS...]

MODEL: transformer | sparse_softmax
sparse_softmax trains with the sparse-softmax cross-entropy (k = SPARSE_K, default 20) and
label smoothing 0.1, as the paper (DESIGN.md 3); transformer is the softmax baseline with
the same label smoothing. The paper fine-tunes UNILM (not available offline); these recipes
train transformer_iwslt_de_en-sized models (6+6, 512/1024, 4 heads) from scratch, with Adam
(0.9, 0.98), lr 5e-4, inverse-sqrt schedule, 4000 warm-up updates, dropout 0.3, 4096 tokens
a batch, 20000 updates (our choices, not the paper's).
Flags after -- go to fairseq-train last; --dry-run prints the command.
Variables: DATA_BIN (default \$DATA_ROOT/squad_qg/data-bin), SAVE_DIR (default
\$CHECKPOINT_ROOT/squad_qg/MODEL), LAUNCHER, SPARSE_K, LABEL_SMOOTHING.
Output: checkpoints and train.log in SAVE_DIR."
source "$(dirname "$0")/../lib/recipe.sh"

DATASET=squad_qg
DATA_BIN=${DATA_BIN:-$DATA_ROOT/squad_qg/data-bin}
SRC_LANG=src
RECIPE_MODELS=(transformer sparse_softmax)
TRANSFORMER_ARCH=transformer_iwslt_de_en
TRAIN_ARGS=(--task translation --source-lang src --target-lang tgt --truncate-source
            --max-source-positions 512 --max-target-positions 128
            --optimizer adam --adam-betas "(0.9, 0.98)" --clip-norm 0.0 --lr 5e-4
            --lr-scheduler inverse_sqrt --warmup-updates 4000 --warmup-init-lr 1e-07
            --dropout 0.3 --weight-decay 0.0001 --max-tokens 4096 --max-update 20000
            --keep-last-epochs 5)
recipe_model_args() { recipe_seq2seq_model_args "$1"; }
recipe_train_main "$@"
