# shellcheck shell=bash
# train.sh and evaluate.sh of the sparse-softmax paper's text generation data sets (Gigaword-10k
# headlines, SQuAD 1.1 question generation), sourced after recipe.sh. A data set's script sets
#   DATASET          gigaword_10k or squad_qg (data in $DATA_ROOT/$DATASET)
#   TASK_TITLE       what the task is, for the usage text
#   DECODE_ARGS      (evaluate.sh) the reference decoding: beam, length penalty, n-gram
#                    blocking, length cap
#   DECODE_SOURCE    (evaluate.sh) where DECODE_ARGS come from, for the usage text
#   SCORE_ARGS       (evaluate.sh) score.py's metric flags
#   SCORE_TEXT       (evaluate.sh) what is scored, for the usage text
# then calls text_generation_train_main "$@" or text_generation_evaluate_main "$@".
#
# PRETRAINED=CHECKPOINT starts training from that checkpoint's weights
# (--finetune-from-model: fresh optimiser, schedule and data order), the paper's setting of
# fine-tuning a trained model with the sparse-softmax loss. Its checkpoints go to
# $CHECKPOINT_ROOT/$DATASET/MODEL-finetuned, which evaluate.sh reads when PRETRAINED is set.

RECIPE_MODELS=(transformer sparse_softmax)
DATA_BIN=${DATA_BIN:-$DATA_ROOT/$DATASET/data-bin}
SRC_LANG=src
TRANSFORMER_ARCH=transformer_iwslt_de_en
# the models read 512 source and 128 target pieces (UniLM's 192-token Gigaword input is shorter)
POSITION_ARGS=(--truncate-source --max-source-positions 512 --max-target-positions 128)

_text_generation_save_dir() {  # SAVE_DIR default: MODEL, or MODEL-finetuned with PRETRAINED
    local name=$1
    [[ -z ${PRETRAINED:-} ]] || name=$1-finetuned
    SAVE_DIR=${SAVE_DIR:-$CHECKPOINT_ROOT/$DATASET/$name}
}

text_generation_train_main() {
    RECIPE_USAGE="usage: [PRETRAINED=CHECKPOINT] scripts/recipes/$DATASET/train.sh [-h] [--dry-run] MODEL [-- FAIRSEQ_TRAIN_FLAGS...]

Trains a sequence-to-sequence model on $TASK_TITLE.
MODEL: transformer | sparse_softmax
sparse_softmax trains with the sparse-softmax cross-entropy (k = SPARSE_K, default 20) and
label smoothing 0.1, as the paper; transformer is the softmax baseline with the same label
smoothing. The paper fine-tunes UniLM (not available offline): these recipes train
transformer_iwslt_de_en-sized models (6+6 layers, 512/1024, 4 heads) with Adam (0.9, 0.98),
lr 5e-4, inverse-sqrt schedule, 4000 warm-up updates, dropout 0.3, 4096 tokens a batch,
20000 updates (our choices, not the paper's).
To compare the losses as the paper does, fine-tune one trained model both ways:
  scripts/recipes/$DATASET/train.sh transformer
  PRETRAINED=\$CHECKPOINT_ROOT/$DATASET/transformer/checkpoint_best.pt \\
      scripts/recipes/$DATASET/train.sh sparse_softmax   # and again with transformer
PRETRAINED: a checkpoint of the same architecture and dictionary to start from
(fairseq-train --finetune-from-model); the run goes to \$CHECKPOINT_ROOT/$DATASET/MODEL-finetuned.
Flags after -- go to fairseq-train last; --dry-run prints the command.
Variables: PRETRAINED, DATA_BIN (default \$DATA_ROOT/$DATASET/data-bin), SAVE_DIR, LAUNCHER,
SPARSE_K, LABEL_SMOOTHING (see scripts/recipes/lib/recipe.sh).
Output: checkpoints and train.log in SAVE_DIR."
    recipe_handle_help "$@"
    recipe_parse_model_args "$@"
    _text_generation_save_dir "$MODEL"
    TRAIN_ARGS=(--task translation --source-lang src --target-lang tgt "${POSITION_ARGS[@]}"
                --optimizer adam --adam-betas "(0.9, 0.98)" --clip-norm 0.0 --lr 5e-4
                --lr-scheduler inverse_sqrt --warmup-updates 4000 --warmup-init-lr 1e-07
                --dropout 0.3 --weight-decay 0.0001 --max-tokens 4096 --max-update 20000
                --keep-last-epochs 5)
    if [[ -n ${PRETRAINED:-} ]]; then
        ((DRY_RUN)) || [[ -f $PRETRAINED ]] || \
            recipe_die "PRETRAINED=$PRETRAINED is not a file: give a checkpoint (.pt) of a \
model trained on $DATA_BIN, e.g. \$CHECKPOINT_ROOT/$DATASET/transformer/checkpoint_best.pt" 2
        TRAIN_ARGS+=(--finetune-from-model "$PRETRAINED")
    fi
    recipe_model_args() { recipe_seq2seq_model_args "$1"; }
    recipe_train_main "$@"
}

text_generation_evaluate_main() {
    RECIPE_USAGE="usage: [PRETRAINED=CHECKPOINT] scripts/recipes/$DATASET/evaluate.sh [-h] [--dry-run] MODEL [-- FAIRSEQ_GENERATE_FLAGS...]

Decodes the $TASK_TITLE test set and scores it.
fairseq-generate as $DECODE_SOURCE: ${DECODE_ARGS[*]}; BPE removed.
sparse_softmax decodes with top-k sparse-softmax keeping SPARSE_DECODE_K (default 5, the
paper's top-5) tokens a step. Then $SCORE_TEXT.
With PRETRAINED set (as for train.sh) the fine-tuned run MODEL-finetuned is decoded.
Variables: PRETRAINED, BEAM, SPARSE_DECODE_K, SUBSET, CHECKPOINT, SAVE_DIR, DATA_BIN, RESULTS.
Outputs: SAVE_DIR/generate-SUBSET.txt and the JSON results file (also printed)."
    recipe_handle_help "$@"
    recipe_parse_model_args "$@"
    _text_generation_save_dir "$MODEL"
    GENERATE_ARGS=("${DECODE_ARGS[@]}" --remove-bpe "${POSITION_ARGS[@]}" --batch-size 128)
    recipe_evaluate_main "$@"
}
