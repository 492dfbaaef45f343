#!/usr/bin/env bash
# Europarl v7 English-German documents, packed into segments of 128 ... 2048 tokens.
set -euo pipefail
RECIPE_USAGE="usage: EUROPARL_ARCHIVE=/path/to/europarl.tgz scripts/recipes/europarl7_doc/prepare.sh [-h]

Prepares document-level Europarl7 En-De (DESIGN.md 5). Takes the Europarl v7 source release
(txt/<lang>/ep-YY-MM-DD.txt, one session a file). A document is a chapter (<CHAPTER ID=..>)
present in both languages with the same <SPEAKER>/<P> structure; inside each block its
sentences are aligned with Gale-Church (as Europarl's sentence-align-corpus.perl does).
Of every EUROPARL_HOLDOUT_EVERY documents (in session order) one goes to valid and one to test.
Then Moses tokenisation (sacremoses, case kept), joint BPE, and consecutive sentence pairs of a
document are packed into segments of at most L BPE tokens a side (G-Transformer's way; the
ReLUFormer paper's own builder is not public), for each L in EUROPARL_SEGMENT_LENGTHS.
All segment lengths share one joined dictionary.

Variables:
  EUROPARL_ARCHIVE          europarl.tgz (v7 source release) or a folder holding txt/en, txt/de
  EUROPARL_ARCHIVE_SHA256   optional expected sha256 of the archive (none is published)
  EUROPARL_SEGMENT_LENGTHS  default '128 256 512 1024 2048'
  EUROPARL_HOLDOUT_EVERY    default 50
  EUROPARL_BPE_MERGES       default 30000
  DATA_ROOT, WORKERS, PYTHON   see scripts/recipes/lib/recipe.sh

Outputs in \$DATA_ROOT/europarl7_doc/: data-bin/seg<L>/ for each L (for train.sh with
SEGMENT_LENGTH=L), text/ (aligned sentences, docid files), segments/seg<L>/ (packed text)."
source "$(dirname "$0")/../lib/recipe.sh"
recipe_handle_help "$@"
(($# == 0)) || recipe_die "prepare.sh takes no arguments, only variables (see -h)"

WORK=$DATA_ROOT/europarl7_doc
read -r -a LENGTHS <<<"${EUROPARL_SEGMENT_LENGTHS:-128 256 512 1024 2048}"
# the longest first: its training text has every token (shorter ones truncate more), so its
# dictionary is the one all lengths share
mapfile -t LENGTHS < <(printf '%s\n' "${LENGTHS[@]}" | sort -rn)
MERGES=${EUROPARL_BPE_MERGES:-30000}

if [[ -d ${EUROPARL_ARCHIVE:-} ]]; then MEMBERS=(); else MEMBERS=(txt/en txt/de); fi
recipe_fetch "$WORK/orig" EUROPARL_ARCHIVE "Europarl v7 source release" \
    "Fetch europarl.tgz (the v7 source release with txt/<lang>/ep-*.txt session files) from \
https://www.statmt.org/europarl/ (v7, 'source release'), copy it here, and run: \
EUROPARL_ARCHIVE=/path/to/europarl.tgz $0" "${MEMBERS[@]+"${MEMBERS[@]}"}"

extract_documents() {
    local txt
    txt=$(dirname "$(dirname "$(recipe_find "$WORK/orig" 'ep-*.txt')")")
    corpus_formats europarl --txt-dir "$txt" --src-lang en --tgt-lang de \
        --holdout-every "${EUROPARL_HOLDOUT_EVERY:-50}" --out-dir "$STEP_OUT"
}

tokenize() {
    local lang
    for lang in en de; do
        prepare_text tokenize --lang "$lang" --workers "$WORKERS" \
            -i "$WORK/text"/{train,valid,test}."$lang" -o "$STEP_OUT"/{train,valid,test}."$lang"
    done
}

bpe() {
    recipe_bpe "$MERGES" "$WORK/tok" en de
    cp "$WORK/text"/*.docid "$STEP_OUT/"
}

pack() {
    local split
    for split in train valid test; do
        prepare_text pack --max-tokens "$1" --doc-ids "$WORK/bpe/$split.docid" \
            --src-in "$WORK/bpe/$split.en" --tgt-in "$WORK/bpe/$split.de" \
            --src-out "$STEP_OUT/$split.en" --tgt-out "$STEP_OUT/$split.de"
    done
}

recipe_step extract "$WORK/text" extract_documents
recipe_step tokenize "$WORK/tok" tokenize
recipe_step bpe "$WORK/bpe" bpe
DICT=
for L in "${LENGTHS[@]}"; do
    recipe_step "pack-$L" "$WORK/segments/seg$L" pack "$L"
    if [[ -z $DICT ]]; then
        recipe_step "binarize-$L" "$WORK/data-bin/seg$L" recipe_binarize en de \
            "$WORK/segments/seg$L" --joined-dictionary
        DICT=$WORK/data-bin/seg$L/dict.en.txt
    else
        recipe_step "binarize-$L" "$WORK/data-bin/seg$L" recipe_binarize en de \
            "$WORK/segments/seg$L" --joined-dictionary --srcdict "$DICT"
    fi
done
recipe_log "outputs: binarized data $WORK/data-bin/seg{$(IFS=,; echo "${LENGTHS[*]}")}; \
aligned documents $WORK/text; BPE codes $WORK/bpe/code"
