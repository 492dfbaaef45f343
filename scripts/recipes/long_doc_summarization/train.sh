#!/usr/bin/env bash
# Train a long-document summarizer on arXiv or PubMed with the Pyramidion paper's settings.
set -euo pipefail
RECIPE_USAGE="usage: DATASET=arxiv|pubmed scripts/recipes/long_doc_summarization/train.sh [-h] [--dry-run] MODEL [-- FAIRSEQ_TRAIN_FLAGS...]

MODEL: transformer | vanilla | blockwise | transpooler | transpooler_4x | pyramidion |
       deep_pyramidion
  transformer: vanilla encoder-decoder, transformer base (6+6, 512/2048, 8 heads; ours);
  vanilla: vanilla_full_attention_8k, the paper's full-attention comparison model #3 (2+2
    layers: depth not published; python -m relu_former.help vanilla_full_attention_8k);
  blockwise: blockwise_transformer_base (encoder attends in blocks of 512, no pooling);
  transpooler: transpooler_base (6+6, blocks of 512, pools once after the encoder to 2048; ours);
  transpooler_4x: the paper's table-4 Transpooler (4 layers, pools once, 4x shorter);
  pyramidion: pyramidion_base (3+3 layers, blocks of 512, 8192 -> 4096 (layer 2) -> 2048
    (layer 3)), the paper's Pyramidion #13;
  deep_pyramidion: 6+6 layers, blocks of 512, 8192 -> 4096 (layer 2) -> 2048 (layer 4): the
    schedule is ours (not published).
  Change the schedule with -- --pooling-schedule SPEC (see the README's pyramidion section).
Defaults are the Pyramidion paper's and its authors' README command: shared embeddings
(--share-all-embeddings), dropout 0.1 and attention dropout 0.1, Adam with its default betas
(0.9, 0.999), lr 5e-4, polynomial decay over TOTAL_UPDATES (default 300000, the authors')
after 5000 warm-up updates, weight decay 0.1, BATCH_DOCUMENTS (16) documents a batch x
UPDATE_FREQ (16), inputs of MAX_SOURCE_TOKENS (8192) pieces, summaries of MAX_TARGET_TOKENS
(512); training stops after 7 validations without improvement of the validation loss
(--patience 7; the paper watches its validation score, which fairseq's translation task
cannot compute during training). Label smoothing 0.1 is ours (not stated in the paper).
On a machine smaller than the authors' GPUs, lower TOTAL_UPDATES and UPDATE_FREQ.
Flags after -- go to fairseq-train last; --dry-run prints the command.
Variables: DATASET (required), DATA_BIN (default \$DATA_ROOT/\$DATASET/data-bin), SAVE_DIR
(default \$CHECKPOINT_ROOT/\$DATASET/MODEL), LAUNCHER, TOTAL_UPDATES, BATCH_DOCUMENTS,
UPDATE_FREQ, LABEL_SMOOTHING.
Output: checkpoints and train.log in SAVE_DIR."
source "$(dirname "$0")/../lib/recipe.sh"
recipe_handle_help "$@"

[[ ${DATASET:-} == arxiv || ${DATASET:-} == pubmed ]] || \
    recipe_die "set DATASET=arxiv or DATASET=pubmed (got '${DATASET:-}')" 2
DATA_BIN=${DATA_BIN:-$DATA_ROOT/$DATASET/data-bin}
SRC_LANG=src
RECIPE_MODELS=(transformer vanilla blockwise transpooler transpooler_4x pyramidion
               deep_pyramidion)
TRANSFORMER_ARCH=transformer_wmt_en_de
declare -A POOLING_ARCH=([vanilla]=vanilla_full_attention_8k
                         [blockwise]=blockwise_transformer_base [transpooler]=transpooler_base
                         [transpooler_4x]=transpooler_4x [pyramidion]=pyramidion_base
                         [deep_pyramidion]=deep_pyramidion)
TOTAL=${TOTAL_UPDATES:-300000}
TRAIN_ARGS=(--task translation --source-lang src --target-lang tgt
            --max-source-positions "${MAX_SOURCE_TOKENS:-8192}"
            --max-target-positions "${MAX_TARGET_TOKENS:-512}"
            --optimizer adam --adam-betas "(0.9, 0.999)" --clip-norm 0.0 --lr 5e-4
            --lr-scheduler polynomial_decay --warmup-updates 5000 --total-num-update "$TOTAL"
            --max-update "$TOTAL" --weight-decay 0.1 --dropout 0.1 --attention-dropout 0.1
            --share-all-embeddings --batch-size "${BATCH_DOCUMENTS:-16}"
            --update-freq "${UPDATE_FREQ:-16}" --patience 7 --keep-last-epochs 5)
recipe_model_args() { recipe_seq2seq_model_args "$1"; }
recipe_train_main "$@"
