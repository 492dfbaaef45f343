#!/usr/bin/env bash
# SQuAD 1.1 question generation (the sparse-softmax paper's setting).
set -euo pipefail
RECIPE_USAGE="usage: SQUAD_DIR=/path/to/squad scripts/recipes/squad_qg/prepare.sh [-h]

Prepares question generation from SQuAD 1.1 (DESIGN.md 3, 5): the source is the answer, a
'<sep>' token and the paragraph, the target the question (UNILM's input form), all Moses-
tokenised and lower-cased. SQuAD's test set is hidden, so train-v1.1.json is the training
set and the articles of dev-v1.1.json are split in halves: the first half validation, the
second test (in the manner of Zhao et al. 2018's reversed dev-test split; their exact
article lists are not reproduced). Joint BPE
(SQUAD_BPE_MERGES, default 10000, '<sep>' never split), fairseq-preprocess with a joined
dictionary.

Variables:
  SQUAD_DIR               folder (or archive) holding train-v1.1.json and dev-v1.1.json
  SQUAD_DIR_SHA256SUMS    optional sha256sum-format file to check the folder against
  SQUAD_BPE_MERGES        default 10000
  DATA_ROOT, WORKERS, PYTHON   see scripts/recipes/lib/recipe.sh

Outputs in \$DATA_ROOT/squad_qg/: data-bin/ (for train.sh), bpe/code, text/ (tokenised pairs)."
source "$(dirname "$0")/../lib/recipe.sh"
recipe_handle_help "$@"
(($# == 0)) || recipe_die "prepare.sh takes no arguments, only variables (see -h)"

WORK=$DATA_ROOT/squad_qg

recipe_fetch "$WORK/orig" SQUAD_DIR "SQuAD 1.1" \
    "Fetch train-v1.1.json and dev-v1.1.json from https://rajpurkar.github.io/SQuAD-explorer/ \
(SQuAD 1.1) into one folder, copy it here, and run: SQUAD_DIR=/path/to/folder $0"

extract_text() {
    corpus_formats squad-qg -i "$(recipe_find "$WORK/orig" train-v1.1.json)" --out-dir "$STEP_OUT"
    corpus_formats squad-qg -i "$(recipe_find "$WORK/orig" dev-v1.1.json)" --out-dir "$STEP_OUT" \
        --split-articles
}

recipe_step extract "$WORK/text" extract_text
BPE_GLOSSARIES="<sep>" recipe_step bpe "$WORK/bpe" recipe_bpe "${SQUAD_BPE_MERGES:-10000}" \
    "$WORK/text" src tgt
recipe_step binarize "$WORK/data-bin" recipe_binarize src tgt "$WORK/bpe" --joined-dictionary
recipe_log "outputs: binarized data $WORK/data-bin; BPE codes $WORK/bpe/code; tokenised \
questions $WORK/text/test.tgt"
