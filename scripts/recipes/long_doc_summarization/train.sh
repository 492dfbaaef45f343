#!/usr/bin/env bash
# Train a long-document summarizer on arXiv or PubMed with the Pyramidion paper's settings.
set -euo pipefail
RECIPE_USAGE="usage: DATASET=arxiv|pubmed scripts/recipes/long_doc_summarization/train.sh [-h] [--dry-run] MODEL [-- FAIRSEQ_TRAIN_FLAGS...]

MODEL: transformer | blockwise | transpooler | pyramidion | deep_pyramidion
  transformer: vanilla encoder-decoder, transformer base (6+6, 512/2048, 8 heads);
  blockwise: blockwise_transformer_base (encoder attends in blocks of 512, no pooling);
  transpooler: transpooler_base (blocks of 512, pools once after the encoder, to 2048 states);
  pyramidion: pyramidion_base (3+3 layers, blocks of 512, 8192 -> 4096 (layer 2) -> 2048 (layer 3));
  deep_pyramidion: 6+6 layers, blocks of 512, 8192 -> 4096 (layer 2) -> 2048 (layer 4).
  Change the schedule with -- --pooling-schedule SPEC (see the README's pyramidion section).
Defaults are the Pyramidion paper's: Adam, lr 5e-4, polynomial decay over TOTAL_UPDATES
(default 100000) after 5000 warm-up updates, weight decay 0.1, training stopped after 7
validations without improvement (--patience 7), inputs of MAX_SOURCE_TOKENS (8192) pieces,
summaries of MAX_TARGET_TOKENS (512); label smoothing 0.1 and --max-tokens 16384 are our
choices (not stated in the paper).
Flags after -- go to fairseq-train last; --dry-run prints the command.
Variables: DATASET (required), DATA_BIN (default \$DATA_ROOT/\$DATASET/data-bin), SAVE_DIR
(default \$CHECKPOINT_ROOT/\$DATASET/MODEL), LAUNCHER, TOTAL_UPDATES, LABEL_SMOOTHING.
Output: checkpoints and train.log in SAVE_DIR."
source "$(dirname "$0")/../lib/recipe.sh"
recipe_handle_help "$@"

[[ ${DATASET:-} == arxiv || ${DATASET:-} == pubmed ]] || \
    recipe_die "set DATASET=arxiv or DATASET=pubmed (got '${DATASET:-}')" 2
DATA_BIN=${DATA_BIN:-$DATA_ROOT/$DATASET/data-bin}
SRC_LANG=src
RECIPE_MODELS=(transformer blockwise transpooler pyramidion deep_pyramidion)
TRANSFORMER_ARCH=transformer_wmt_en_de
declare -A POOLING_ARCH=([blockwise]=blockwise_transformer_base [transpooler]=transpooler_base
                         [pyramidion]=pyramidion_base [deep_pyramidion]=deep_pyramidion)
TOTAL=${TOTAL_UPDATES:-100000}
TRAIN_ARGS=(--task translation --source-lang src --target-lang tgt
            --max-source-positions "${MAX_SOURCE_TOKENS:-8192}"
            --max-target-positions "${MAX_TARGET_TOKENS:-512}"
            --optimizer adam --adam-betas "(0.9, 0.98)" --clip-norm 0.0 --lr 5e-4
            --lr-scheduler polynomial_decay --warmup-updates 5000 --total-num-update "$TOTAL"
            --max-update "$TOTAL" --weight-decay 0.1 --dropout 0.1 --max-tokens 16384
            --patience 7 --keep-last-epochs 5)
recipe_model_args() { recipe_seq2seq_model_args "$1"; }
recipe_train_main "$@"
