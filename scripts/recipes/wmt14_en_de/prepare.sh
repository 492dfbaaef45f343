#!/usr/bin/env bash
# WMT14 English-German, prepared as fairseq's prepare-wmt14en2de.sh (--icml17 data) does.
set -euo pipefail
RECIPE_USAGE="usage: WMT14_DIR=/path/to/wmt14 scripts/recipes/wmt14_en_de/prepare.sh [-h]

Prepares WMT14 En-De (DESIGN.md 5): Europarl v7 + Common Crawl + News Commentary v9 for
training; Moses punctuation normalisation and tokenisation with aggressive hyphen splitting
(sacremoses); clean ratio 1.5, length 1-250; valid = every 100th training line; test =
newstest2014; joint BPE with 40k merges (subword-nmt), cleaned again after BPE;
fairseq-preprocess with a joined dictionary.

Variables:
  WMT14_DIR            folder holding training-parallel-europarl-v7.tgz,
                       training-parallel-commoncrawl.tgz, training-parallel-nc-v9.tgz and
                       test-full.tgz (archives are unpacked, other files linked), or the
                       unpacked files themselves
  WMT14_DIR_SHA256SUMS optional: a sha256sum-format file to check the folder against
  WMT14_BPE_MERGES     BPE merge operations (default 40000)
  DATA_ROOT, WORKERS, PYTHON   see scripts/recipes/lib/recipe.sh

Outputs in \$DATA_ROOT/wmt14_en_de/: data-bin/ (for train.sh), bpe/code,
text/test.{en,de} (untokenised newstest2014, SacreBLEU's reference)."
source "$(dirname "$0")/../lib/recipe.sh"
recipe_handle_help "$@"
(($# == 0)) || recipe_die "prepare.sh takes no arguments, only variables (see -h)"

WORK=$DATA_ROOT/wmt14_en_de
MERGES=${WMT14_BPE_MERGES:-40000}
CORPORA=(europarl-v7.de-en commoncrawl.de-en news-commentary-v9.de-en)

recipe_fetch "$WORK/orig" WMT14_DIR "WMT14 En-De data" \
    "Fetch from https://www.statmt.org/wmt14/ (translation task) training-parallel-europarl-v7.tgz, \
training-parallel-commoncrawl.tgz, training-parallel-nc-v9.tgz and test-full.tgz into one \
folder (the files fairseq's prepare-wmt14en2de.sh --icml17 downloads), copy it here, and run: \
WMT14_DIR=/path/to/folder $0"

extract_text() {
    local lang corpus files
    for lang in en de; do
        files=()
        for corpus in "${CORPORA[@]}"; do files+=("$(recipe_find "$WORK/orig" "$corpus.$lang")"); done
        cat "${files[@]}" >"$STEP_OUT/train.$lang"
    done
    corpus_formats segments "$(recipe_find "$WORK/orig" newstest2014-deen-src.en.sgm)" \
        -o "$STEP_OUT/test.en"
    corpus_formats segments "$(recipe_find "$WORK/orig" newstest2014-deen-ref.de.sgm)" \
        -o "$STEP_OUT/test.de"
}

tokenize() {
    local lang
    for lang in en de; do
        prepare_text tokenize --lang "$lang" --normalize-punctuation --aggressive-dash-splits \
            --workers "$WORKERS" -i "$WORK/text/train.$lang" "$WORK/text/test.$lang" \
            -o "$STEP_OUT/train.tok.$lang" "$STEP_OUT/test.$lang"
    done
    prepare_text clean --src-in "$STEP_OUT/train.tok.en" --tgt-in "$STEP_OUT/train.tok.de" \
        --src-out "$STEP_OUT/train.all.en" --tgt-out "$STEP_OUT/train.all.de" \
        --ratio 1.5 --min-len 1 --max-len 250
    rm "$STEP_OUT"/train.tok.*
    recipe_split_every "$STEP_OUT" 100 99 en de
}

bpe_and_clean() {
    recipe_bpe "$MERGES" "$WORK/tok" en de
    local split
    for split in train valid; do
        prepare_text clean --src-in "$STEP_OUT/$split.en" --tgt-in "$STEP_OUT/$split.de" \
            --src-out "$STEP_OUT/$split.en" --tgt-out "$STEP_OUT/$split.de" \
            --ratio 1.5 --min-len 1 --max-len 250
    done
}

recipe_step extract "$WORK/text" extract_text
recipe_step tokenize "$WORK/tok" tokenize
recipe_step bpe "$WORK/bpe" bpe_and_clean
recipe_step binarize "$WORK/data-bin" recipe_binarize en de "$WORK/bpe" --joined-dictionary
recipe_log "outputs: binarized data $WORK/data-bin; BPE codes $WORK/bpe/code; untokenised test \
references $WORK/text/test.de"
