#!/usr/bin/env bash
# arXiv or PubMed long-document summarization (Cohan et al. 2018) with SentencePiece.
set -euo pipefail
RECIPE_USAGE="usage: DATASET=arxiv|pubmed {ARXIV,PUBMED}_ARCHIVE=... scripts/recipes/long_doc_summarization/prepare.sh [-h]

Prepares Cohan et al.'s arXiv or PubMed summarization data: each jsonl
document's article_text sentences form the source, its abstract_text (<S> tags dropped) the
target; a SentencePiece model (unigram, 32k pieces as in the Pyramidion paper) is trained on
the training sentences; sources are cut to MAX_SOURCE_TOKENS - 1 pieces and targets to
MAX_TARGET_TOKENS - 1 (room for the end-of-sentence token); fairseq-preprocess with a joined
dictionary. Expected sizes (train/val/test): arXiv 203,037/6,436/6,440, PubMed
119,924/6,633/6,658 documents.

Variables:
  DATASET              arxiv or pubmed (required)
  ARXIV_ARCHIVE        arxiv-dataset.zip, or the folder with train.txt, val.txt, test.txt
  PUBMED_ARCHIVE       pubmed-dataset.zip, or its folder
  <VAR>_SHA256         optional expected sha256 of the archive (none is published)
  SPM_VOCAB_SIZE       default 32000
  MAX_SOURCE_TOKENS    default 8192 (Pyramidion's 8k input)
  MAX_TARGET_TOKENS    default 512
  DATA_ROOT, WORKERS, PYTHON   see scripts/recipes/lib/recipe.sh

Outputs in \$DATA_ROOT/\$DATASET/: data-bin/ (for train.sh), spm/spm.model,
text/test.tgt (untokenised reference abstracts for ROUGE)."
source "$(dirname "$0")/../lib/recipe.sh"
recipe_handle_help "$@"
(($# == 0)) || recipe_die "prepare.sh takes no arguments, only variables (see -h)"

case ${DATASET:-} in
    arxiv) VAR=ARXIV_ARCHIVE; NAME=arxiv-dataset ;;
    pubmed) VAR=PUBMED_ARCHIVE; NAME=pubmed-dataset ;;
    *) recipe_die "set DATASET=arxiv or DATASET=pubmed (got '${DATASET:-}')" 2 ;;
esac
WORK=$DATA_ROOT/$DATASET

RECIPE_EXPECT=("train.txt val.txt test.txt")
recipe_fetch "$WORK/orig" "$VAR" "$DATASET summarization data" \
    "Fetch $NAME.zip of Cohan et al. 2018 (https://github.com/armancohan/long-summarization, \
'arXiv' / 'PubMed' download links) on a machine with internet, copy it here, and run: \
DATASET=$DATASET $VAR=/path/to/$NAME.zip $0"

extract_text() {
    local split file out
    for split in train val test; do
        file=$(recipe_find "$WORK/orig" "$split.txt")
        out=$split
        [[ $split != val ]] || out=valid
        if [[ $split == train ]]; then
            corpus_formats cohan -i "$file" --out-prefix "$STEP_OUT/$out" --sentences
        else
            corpus_formats cohan -i "$file" --out-prefix "$STEP_OUT/$out"
        fi
    done
}

sentencepiece() {
    prepare_text spm-train "$WORK/text/train.sentences" --model-prefix "$STEP_OUT/spm" \
        --vocab-size "${SPM_VOCAB_SIZE:-32000}"
    prepare_text spm-encode --model "$STEP_OUT/spm.model" \
        --max-pieces "$((${MAX_SOURCE_TOKENS:-8192} - 1))" \
        --inputs "$WORK/text"/{train,valid,test}.src --outputs "$STEP_OUT"/{train,valid,test}.src
    prepare_text spm-encode --model "$STEP_OUT/spm.model" \
        --max-pieces "$((${MAX_TARGET_TOKENS:-512} - 1))" \
        --inputs "$WORK/text"/{train,valid,test}.tgt --outputs "$STEP_OUT"/{train,valid,test}.tgt
}

recipe_step extract "$WORK/text" extract_text
recipe_step sentencepiece "$WORK/spm" sentencepiece
recipe_step binarize "$WORK/data-bin" recipe_binarize src tgt "$WORK/spm" --joined-dictionary
recipe_log "outputs: binarized data $WORK/data-bin; SentencePiece model $WORK/spm/spm.model; \
reference abstracts $WORK/text/test.tgt"
