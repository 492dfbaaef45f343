#!/usr/bin/env bash
# SQuAD 1.1 question generation (the sparse-softmax paper's setting).
set -euo pipefail
RECIPE_USAGE="usage: SQUAD_DIR=/path/to/squad scripts/recipes/squad_qg/prepare.sh [-h]

Prepares question generation from SQuAD 1.1: the source is the answer, a '<sep>' token and
the paragraph, the target the question (UniLM's input form), all Moses-tokenised and
lower-cased. A paragraph longer than SQUAD_MAX_PASSAGE_TOKENS (464 Moses tokens, the
paper's input length; 0 = whole) keeps the chunk of that many tokens holding the answer,
as the paper truncates, rather than its first tokens. With Du et al. (2017)'s split (their
SQuAD-format train.json, dev.json and test.json, https://github.com/xinyadu/nqg data/raw) those are the training, validation and
test sets: the standard split UniLM and the paper report on. Otherwise, from SQuAD's own
train-v1.1.json and dev-v1.1.json (its test set is hidden): train-v1.1.json is the training
set and the articles of dev-v1.1.json are split in halves, the first half validation, the
second test (in the manner of Zhao et al. 2018's reversed dev-test split; their exact
article lists are not reproduced). Joint BPE
(SQUAD_BPE_MERGES, default 10000, '<sep>' never split), fairseq-preprocess with a joined
dictionary.

Variables:
  SQUAD_DIR               folder (or archive) holding Du et al.'s train.json, dev.json and
                          test.json, or SQuAD's train-v1.1.json and dev-v1.1.json
  SQUAD_DIR_SHA256SUMS    optional sha256sum-format file to check the folder against
  SQUAD_BPE_MERGES        default 10000
  SQUAD_MAX_PASSAGE_TOKENS  default 464
  DATA_ROOT, WORKERS, PYTHON   see scripts/recipes/lib/recipe.sh

Outputs in \$DATA_ROOT/squad_qg/: data-bin/ (for train.sh), bpe/code, text/ (tokenised pairs)."
source "$(dirname "$0")/../lib/recipe.sh"
recipe_handle_help "$@"
(($# == 0)) || recipe_die "prepare.sh takes no arguments, only variables (see -h)"

WORK=$DATA_ROOT/squad_qg

RECIPE_EXPECT=("train.json dev.json test.json" "train-v1.1.json dev-v1.1.json")
recipe_fetch "$WORK/orig" SQUAD_DIR "SQuAD 1.1 question generation data" \
    "Fetch Du et al.'s split (train.json, dev.json, test.json of \
https://github.com/xinyadu/nqg/tree/master/data/raw), or train-v1.1.json and dev-v1.1.json \
from https://rajpurkar.github.io/SQuAD-explorer/ (SQuAD 1.1), into one folder, copy it here, \
and run: SQUAD_DIR=/path/to/folder $0"

extract_text() {
    local split
    if recipe_has_files "$WORK/orig" train.json dev.json test.json; then
        recipe_log "Du et al.'s split: train.json, dev.json (validation), test.json"
        for split in train dev test; do
            corpus_formats squad-qg -i "$(recipe_find "$WORK/orig" "$split.json")" \
                --out-dir "$STEP_OUT" --split-name "${split/dev/valid}" \
                --max-passage-tokens "${SQUAD_MAX_PASSAGE_TOKENS:-464}"
        done
    else
        corpus_formats squad-qg -i "$(recipe_find "$WORK/orig" train-v1.1.json)" \
            --out-dir "$STEP_OUT" --max-passage-tokens "${SQUAD_MAX_PASSAGE_TOKENS:-464}"
        corpus_formats squad-qg -i "$(recipe_find "$WORK/orig" dev-v1.1.json)" \
            --out-dir "$STEP_OUT" --split-articles \
            --max-passage-tokens "${SQUAD_MAX_PASSAGE_TOKENS:-464}"
    fi
}

recipe_step extract "$WORK/text" extract_text
BPE_GLOSSARIES="<sep>" recipe_step bpe "$WORK/bpe" recipe_bpe "${SQUAD_BPE_MERGES:-10000}" \
    "$WORK/text" src tgt
recipe_step binarize "$WORK/data-bin" recipe_binarize src tgt "$WORK/bpe" --joined-dictionary
recipe_log "outputs: binarized data $WORK/data-bin; BPE codes $WORK/bpe/code; tokenised \
questions $WORK/text/test.tgt"
