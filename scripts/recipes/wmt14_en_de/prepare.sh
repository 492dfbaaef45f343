#!/usr/bin/env bash
# WMT14 English-German, prepared as fairseq's prepare-wmt14en2de.sh (--icml17 data) does.
set -euo pipefail
RECIPE_USAGE="usage: WMT14_DIR=/path/to/wmt14 scripts/recipes/wmt14_en_de/prepare.sh [-h]

Prepares WMT14 En-De as fairseq's examples/translation/prepare-wmt14en2de.sh (--icml17
data) does, except for the validation set: Europarl v7 + Common Crawl + News Commentary v9 for
training, Moses punctuation normalisation, non-printing characters removed, Moses tokenisation
with aggressive hyphen splitting (sacremoses); validation = newstest2013 (the ReLUFormer
paper's; fairseq takes every 100th training line) and test = newstest2014, both without
punctuation normalisation, U+2019 mapped to an ASCII apostrophe (fairseq's sed), then
tokenised the same way; joint BPE with 40k merges (subword-nmt); training pairs cleaned by
length only after BPE (ratio 1.5, 1-250 tokens, clean-corpus-n); fairseq-preprocess with a
joined dictionary.

Variables:
  WMT14_DIR            folder holding training-parallel-europarl-v7.tgz,
                       training-parallel-commoncrawl.tgz, training-parallel-nc-v9.tgz,
                       dev.tgz (newstest2013) and test-full.tgz (archives are unpacked, other
                       files linked), or the unpacked files themselves
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

RECIPE_EXPECT=("$(for c in "${CORPORA[@]}"; do printf '%s.en %s.de ' "$c" "$c"; done) \
newstest2013.en newstest2013.de newstest2014-deen-src.en.sgm newstest2014-deen-ref.de.sgm")
recipe_fetch "$WORK/orig" WMT14_DIR "WMT14 En-De data" \
    "Fetch from https://www.statmt.org/wmt14/ (translation task) training-parallel-europarl-v7.tgz, \
training-parallel-commoncrawl.tgz, training-parallel-nc-v9.tgz, dev.tgz and test-full.tgz \
into one folder (the files fairseq's prepare-wmt14en2de.sh --icml17 downloads, plus dev.tgz), \
copy it here, and run: WMT14_DIR=/path/to/folder $0"

extract_text() {
    local lang corpus files
    for lang in en de; do
        files=()
        for corpus in "${CORPORA[@]}"; do files+=("$(recipe_find "$WORK/orig" "$corpus.$lang")"); done
        cat "${files[@]}" >"$STEP_OUT/train.$lang"
        cp "$(recipe_find "$WORK/orig" "newstest2013.$lang")" "$STEP_OUT/valid.$lang"
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
            --workers "$WORKERS" -i "$WORK/text/train.$lang" -o "$STEP_OUT/train.$lang"
        prepare_text tokenize --lang "$lang" --straight-apostrophes --aggressive-dash-splits \
            -i "$WORK/text"/{valid,test}."$lang" -o "$STEP_OUT"/{valid,test}."$lang"
    done
}

bpe_and_clean() {
    recipe_bpe "$MERGES" "$WORK/tok" en de
    # only the training pairs: newstest2013 stays whole, as the test set
    prepare_text clean --src-in "$STEP_OUT/train.en" --tgt-in "$STEP_OUT/train.de" \
        --src-out "$STEP_OUT/train.en" --tgt-out "$STEP_OUT/train.de" \
        --ratio 1.5 --min-len 1 --max-len 250
}

recipe_step extract "$WORK/text" extract_text
recipe_step tokenize "$WORK/tok" tokenize
recipe_step bpe "$WORK/bpe" bpe_and_clean
recipe_step binarize "$WORK/data-bin" recipe_binarize en de "$WORK/bpe" --joined-dictionary
recipe_log "outputs: binarized data $WORK/data-bin; BPE codes $WORK/bpe/code; untokenised test \
references $WORK/text/test.de"
