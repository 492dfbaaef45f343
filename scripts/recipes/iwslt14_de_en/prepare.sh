#!/usr/bin/env bash
# IWSLT14 German-English, prepared as fairseq's examples/translation/prepare-iwslt14.sh does.
set -euo pipefail
RECIPE_USAGE="usage: IWSLT14_ARCHIVE=/path/to/de-en.tgz scripts/recipes/iwslt14_de_en/prepare.sh [-h]

Prepares IWSLT14 De-En as fairseq's examples/translation/prepare-iwslt14.sh does: Moses
tokenisation (sacremoses), clean ratio 1.5 and length 1-175 (train), lower-casing, valid =
every 23rd training line, test = dev2010 + tedx.dev2012 + tst2010-2012 with U+2019 mapped to
an ASCII apostrophe before tokenising (fairseq's sed), joint BPE (subword-nmt),
fairseq-preprocess with a joined dictionary.

Variables:
  IWSLT14_ARCHIVE       de-en.tgz of WIT3's 2014-01 release, or the folder it unpacks to
  IWSLT14_ARCHIVE_SHA256  optional: its expected sha256 (no checksum is published)
  IWSLT14_BPE_MERGES    BPE merge operations (default 10000)
  DATA_ROOT, WORKERS, PYTHON   see scripts/recipes/lib/recipe.sh

Outputs in \$DATA_ROOT/iwslt14_de_en/: data-bin/ (binarized, for train.sh), bpe/code,
text/test.{de,en} (untokenised test set, SacreBLEU's reference). Each step is skipped when
its folder holds a .done marker."
source "$(dirname "$0")/../lib/recipe.sh"
recipe_handle_help "$@"
(($# == 0)) || recipe_die "prepare.sh takes no arguments, only variables (see -h)"

WORK=$DATA_ROOT/iwslt14_de_en
MERGES=${IWSLT14_BPE_MERGES:-10000}
TEST_SETS=(IWSLT14.TED.dev2010 IWSLT14.TEDX.dev2012 IWSLT14.TED.tst2010 IWSLT14.TED.tst2011
           IWSLT14.TED.tst2012)

RECIPE_EXPECT=("train.tags.de-en.de train.tags.de-en.en $(for t in "${TEST_SETS[@]}"; do
    printf '%s.de-en.de.xml %s.de-en.en.xml ' "$t" "$t"; done)")
recipe_fetch "$WORK/orig" IWSLT14_ARCHIVE "IWSLT14 De-En archive" \
    "Fetch de-en.tgz of the IWSLT 2014 evaluation campaign (WIT3 2014-01, texts/de/en/de-en.tgz; \
fairseq's prepare-iwslt14.sh takes it from http://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz) \
on a machine with internet, copy it here, and run: IWSLT14_ARCHIVE=/path/to/de-en.tgz $0"

extract_text() {
    local lang name files
    for lang in de en; do
        corpus_formats iwslt-train -i "$(recipe_find "$WORK/orig" "train.tags.de-en.$lang")" \
            -o "$STEP_OUT/train.$lang"
        files=()
        for name in "${TEST_SETS[@]}"; do
            files+=("$(recipe_find "$WORK/orig" "$name.de-en.$lang.xml")")
        done
        corpus_formats segments "${files[@]}" -o "$STEP_OUT/test.$lang"
    done
}

tokenize() {
    local lang
    for lang in de en; do
        prepare_text tokenize --lang "$lang" --workers "$WORKERS" -i "$WORK/text/train.$lang" \
            -o "$STEP_OUT/train.tok.$lang"
    done
    # the test set is not cleaned, only tokenised and lower-cased
    for lang in de en; do
        prepare_text tokenize --lang "$lang" --lowercase --straight-apostrophes \
            -i "$WORK/text/test.$lang" -o "$STEP_OUT/test.$lang"
    done
    prepare_text clean --src-in "$STEP_OUT/train.tok.de" --tgt-in "$STEP_OUT/train.tok.en" \
        --src-out "$STEP_OUT/train.clean.de" --tgt-out "$STEP_OUT/train.clean.en" \
        --ratio 1.5 --min-len 1 --max-len 175
    for lang in de en; do
        prepare_text lowercase -i "$STEP_OUT/train.clean.$lang" -o "$STEP_OUT/train.all.$lang"
        rm "$STEP_OUT/train.tok.$lang" "$STEP_OUT/train.clean.$lang"
    done
    recipe_split_every "$STEP_OUT" 23 22 de en
}

recipe_step extract "$WORK/text" extract_text
recipe_step tokenize "$WORK/tok" tokenize
recipe_step bpe "$WORK/bpe" recipe_bpe "$MERGES" "$WORK/tok" de en
recipe_step binarize "$WORK/data-bin" recipe_binarize de en "$WORK/bpe" --joined-dictionary
recipe_log "outputs: binarized data $WORK/data-bin; BPE codes $WORK/bpe/code; untokenised test \
references $WORK/text/test.en"
