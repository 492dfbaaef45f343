#!/usr/bin/env bash
# Europarl v7 English-German documents, packed into segments of 128 ... 2048 tokens.
set -euo pipefail
RECIPE_USAGE="usage: EUROPARL_ARCHIVE=/path/to/europarl.tgz scripts/recipes/europarl7_doc/prepare.sh [-h]

Prepares document-level Europarl7 En-De from either input:
- the standard document-level split (Maruf et al. 2019, the one G-Transformer and later work
  report on): concatenated_en2de_{train,dev,test}_{en,de}.txt, one sentence a line, a '<d>'
  line before each document; used as it is;
- or the Europarl v7 source release (txt/<lang>/ep-YY-MM-DD.txt, one session a file, one
  paragraph a line). Paragraphs are split into sentences with the Moses splitter
  (split-sentences.perl's rules, as Europarl's own aligner does); <BRK>, closing tags and
  empty lines are dropped. A document is a chapter (<CHAPTER ID=..>) present in both
  languages with the same <SPEAKER>/<P> structure; inside each block the sentences are
  aligned with Gale-Church (Europarl's sentence-align-corpus.perl). Of every
  EUROPARL_HOLDOUT_EVERY documents (in session order) one goes to valid and one to test.
Then Moses tokenisation (sacremoses), Moses truecasing as G-Transformer prepares Europarl (a
truecaser per language learnt on the training side; EUROPARL_TRUECASE=0 keeps the case),
joint BPE, and consecutive whole sentence
pairs of a document are packed into segments shorter than L tokens, for each L in
EUROPARL_SEGMENT_LENGTHS, as G-Transformer's builder counts them: each pair adds its longer
side's BPE tokens + 2. A segment never splits a sentence pair, so both sides hold the same
sentences; a pair that reaches L alone is a segment of its own, kept whole, and the count of
such pairs is logged. All segment lengths share one joined dictionary.

Variables:
  EUROPARL_ARCHIVE          europarl.tgz (v7 source release), or a folder or archive holding
                            txt/en and txt/de, or the concatenated_en2de_* files
  EUROPARL_ARCHIVE_SHA256   optional expected sha256 of the archive (none is published)
  EUROPARL_SEGMENT_LENGTHS  default '128 256 512 1024 2048'
  EUROPARL_HOLDOUT_EVERY    default 50
  EUROPARL_BPE_MERGES       default 30000
  EUROPARL_TRUECASE         1 (default: truecase, G-Transformer's) or 0 (keep the case)
  DATA_ROOT, WORKERS, PYTHON   see scripts/recipes/lib/recipe.sh

Outputs in \$DATA_ROOT/europarl7_doc/: data-bin/seg<L>/ for each L (for train.sh with
SEGMENT_LENGTH=L), text/ (aligned sentences, docid files), segments/seg<L>/ (packed text)."
source "$(dirname "$0")/../lib/recipe.sh"
recipe_handle_help "$@"
(($# == 0)) || recipe_die "prepare.sh takes no arguments, only variables (see -h)"

WORK=$DATA_ROOT/europarl7_doc
read -r -a LENGTHS <<<"${EUROPARL_SEGMENT_LENGTHS:-128 256 512 1024 2048}"
# the longest first; its dictionary is the one all lengths share (every length holds the same
# sentences, so any would do)
mapfile -t LENGTHS < <(printf '%s\n' "${LENGTHS[@]}" | sort -rn)
MERGES=${EUROPARL_BPE_MERGES:-30000}
[[ ${EUROPARL_TRUECASE:-1} == [01] ]] || recipe_die "EUROPARL_TRUECASE=$EUROPARL_TRUECASE: \
give 1 (truecase, G-Transformer's) or 0 (keep the case)" 2

CONCATENATED=concatenated_en2de_{train,dev,test}_{en,de}.txt
# the v7 release holds 21 languages: only English, German and the concatenated split unpacked
if [[ -d ${EUROPARL_ARCHIVE:-} ]]; then MEMBERS=()
else MEMBERS=('*txt/en/*' '*txt/de/*' '*concatenated_en2de_*'); fi
RECIPE_EXPECT=("ep-*.txt" "$(eval echo "$CONCATENATED")")
recipe_fetch "$WORK/orig" EUROPARL_ARCHIVE "Europarl document data" \
    "Fetch the document-level split concatenated_en2de_{train,dev,test}_{en,de}.txt (Maruf et \
al. 2019, https://github.com/sameenmaruf/selective-attn, 'Europarl'), or europarl.tgz (the v7 \
source release with txt/<lang>/ep-*.txt session files) from https://www.statmt.org/europarl/, \
copy it here, and run: EUROPARL_ARCHIVE=/path/to/archive-or-folder $0" \
    "${MEMBERS[@]+"${MEMBERS[@]}"}"

extract_documents() {
    local txt
    if recipe_has_files "$WORK/orig" concatenated_en2de_train_en.txt; then
        txt=$(dirname "$(recipe_find "$WORK/orig" concatenated_en2de_train_en.txt)")
        corpus_formats concatenated-docs --dir "$txt" --out-dir "$STEP_OUT"
    else
        txt=$(dirname "$(dirname "$(recipe_find "$WORK/orig" 'ep-*.txt')")")
        corpus_formats europarl --txt-dir "$txt" --src-lang en --tgt-lang de \
            --holdout-every "${EUROPARL_HOLDOUT_EVERY:-50}" --out-dir "$STEP_OUT"
    fi
}

tokenize() {
    local lang
    for lang in en de; do
        prepare_text tokenize --lang "$lang" --workers "$WORKERS" \
            -i "$WORK/text"/{train,valid,test}."$lang" -o "$STEP_OUT"/{train,valid,test}."$lang"
    done
}

truecase() {  # G-Transformer's step between tokenisation and BPE
    local lang split
    for lang in en de; do
        if [[ ${EUROPARL_TRUECASE:-1} == 1 ]]; then
            recipe_python -m scripts.recipes.lib.truecase --train "$WORK/tok/train.$lang" \
                --model "$STEP_OUT/truecase-model.$lang" \
                --inputs "$WORK/tok"/{train,valid,test}."$lang" \
                --outputs "$STEP_OUT"/{train,valid,test}."$lang"
        else
            for split in train valid test; do cp "$WORK/tok/$split.$lang" "$STEP_OUT/"; done
        fi
    done
}

bpe() {
    recipe_bpe "$MERGES" "$WORK/truecase" en de
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
recipe_step truecase "$WORK/truecase" truecase
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
