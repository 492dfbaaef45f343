#!/usr/bin/env bash
# Gigaword headline generation with 10k training pairs (the sparse-softmax paper's setting).
set -euo pipefail
RECIPE_USAGE="usage: GIGAWORD_ARCHIVE=/path/to/gigaword.tgz scripts/recipes/gigaword_10k/prepare.sh [-h]

Prepares Gigaword-10k, the sparse-softmax paper's low-resource headline generation: Rush et
al.'s lower-cased, tokenised article/headline pairs in UniLM's org_data layout
({train,dev,test}.{src,tgt}.txt). The training set is UniLM's published 10k subset, the files
train.src.10k and train.tgt.10k beside org_data/ in UniLM's archive (the names its README's
fine-tuning command reads; WordPiece continuations '##' are joined back into words). An
input without them stops with an error, unless GIGAWORD_TRAIN_SUBSET=first chooses the first
GIGAWORD_TRAIN_SIZE (10000) pairs of org_data/train instead (another subset than the
paper's, logged). The first
GIGAWORD_VALID_SIZE (2000) dev pairs form the validation set, the test set (1951 pairs) is
kept whole. No further tokenisation (the text is already tokenised); joint BPE
(GIGAWORD_BPE_MERGES, default 10000: our choice, the paper fine-tunes UniLM with its own
WordPiece vocabulary); fairseq-preprocess with a joined dictionary.

Variables:
  GIGAWORD_ARCHIVE         archive or folder holding org_data/{train,dev,test}.{src,tgt}.txt
  GIGAWORD_ARCHIVE_SHA256  optional expected sha256 of the archive (none is published)
  GIGAWORD_TRAIN_SUBSET    unilm (default: train.{src,tgt}.10k required) or first
  GIGAWORD_TRAIN_SIZE, GIGAWORD_VALID_SIZE, GIGAWORD_BPE_MERGES
  DATA_ROOT, WORKERS, PYTHON   see scripts/recipes/lib/recipe.sh

Outputs in \$DATA_ROOT/gigaword_10k/: data-bin/ (for train.sh), bpe/code, text/test.tgt
(reference headlines for ROUGE)."
source "$(dirname "$0")/../lib/recipe.sh"
recipe_handle_help "$@"
(($# == 0)) || recipe_die "prepare.sh takes no arguments, only variables (see -h)"

WORK=$DATA_ROOT/gigaword_10k

RECIPE_EXPECT=("train.src.txt train.tgt.txt dev.src.txt dev.tgt.txt test.src.txt test.tgt.txt")
recipe_fetch "$WORK/orig" GIGAWORD_ARCHIVE "Gigaword summarization data" \
    "Fetch the Gigaword headline data in UniLM's layout (org_data/{train,dev,test}.{src,tgt}.txt, \
linked from https://github.com/microsoft/unilm/tree/master/unilm-v1 'Gigaword'; Rush et al.'s \
release https://github.com/harvardnlp/sent-summary holds the same text), copy it here, and \
run: GIGAWORD_ARCHIVE=/path/to/archive-or-folder $0"

SUBSET=${GIGAWORD_TRAIN_SUBSET:-unilm}
[[ $SUBSET == unilm || $SUBSET == first ]] || recipe_die "GIGAWORD_TRAIN_SUBSET=$SUBSET: \
choose unilm (UniLM's train.src.10k/train.tgt.10k) or first (the first GIGAWORD_TRAIN_SIZE \
pairs of org_data/train)" 2

published_10k() {  # published_10k SIDE: UniLM's 10k training file of SIDE, if the input has it
    if recipe_has_files "$WORK/orig" "train.$1.10k"; then recipe_find "$WORK/orig" "train.$1.10k"; fi
}

if [[ $SUBSET == unilm ]] && ! recipe_is_done "$WORK/text" && \
        ! recipe_has_files "$WORK/orig" train.src.10k train.tgt.10k; then
    recipe_die "the input has no 10k training subset (UniLM's train.src.10k and train.tgt.10k, \
beside org_data/ in its Gigaword archive): point GIGAWORD_ARCHIVE at UniLM's archive, or set \
GIGAWORD_TRAIN_SUBSET=first to train on the first ${GIGAWORD_TRAIN_SIZE:-10000} pairs of \
org_data/train instead (not the paper's subset)" 2
fi

extract_text() {
    local side published
    for side in src tgt; do
        published=
        [[ $SUBSET != unilm ]] || published=$(published_10k "$side")
        if [[ -n $published ]]; then
            recipe_log "training pairs: the published 10k subset $published"
            sed 's/ ##//g' "$published" >"$STEP_OUT/train.$side"
        else
            recipe_log "GIGAWORD_TRAIN_SUBSET=first: the first ${GIGAWORD_TRAIN_SIZE:-10000} \
pairs of org_data/train are the training set (not UniLM's published subset)"
            head -n "${GIGAWORD_TRAIN_SIZE:-10000}" "$(recipe_find "$WORK/orig" "train.$side.txt")" \
                >"$STEP_OUT/train.$side"
        fi
        head -n "${GIGAWORD_VALID_SIZE:-2000}" "$(recipe_find "$WORK/orig" "dev.$side.txt")" \
            >"$STEP_OUT/valid.$side"
        cp "$(recipe_find "$WORK/orig" "test.$side.txt")" "$STEP_OUT/test.$side"
    done
}

recipe_step extract "$WORK/text" extract_text
recipe_step bpe "$WORK/bpe" recipe_bpe "${GIGAWORD_BPE_MERGES:-10000}" "$WORK/text" src tgt
recipe_step binarize "$WORK/data-bin" recipe_binarize src tgt "$WORK/bpe" --joined-dictionary
recipe_log "outputs: binarized data $WORK/data-bin; BPE codes $WORK/bpe/code; reference \
headlines $WORK/text/test.tgt"
