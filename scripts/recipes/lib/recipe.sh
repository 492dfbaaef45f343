# shellcheck shell=bash
# The one library every recipe script sources (scripts/<dataset>/{prepare,train,evaluate}.sh).
#
# - Steps are atomic and idempotent: `recipe_step NAME DIR FUNCTION ARGS...` runs FUNCTION
#   with $STEP_OUT set to a fresh DIR.tmp.XXXXXXXX (unique to the run), writes .done in it,
#   then renames it to DIR. A DIR with .done is a finished step and is skipped; a left-over
#   DIR.tmp.* (interrupted run) is never read and is removed by the next run.
# - One run at a time per data set: the fetch step takes an exclusive lock
#   ($DATA_ROOT/.<data set>.lock, flock) held until the script exits; a second prepare.sh on
#   the same data set stops at once with exit code 4 and says which run holds it.
# - A prepared data set is never removed by a script: when the input variable names another
#   input than the one the data set was prepared from, the new input is checked completely
#   first, and the script refuses (exit 2), saying which folder to move away, unless only the
#   fetch step was done; archive members that are links, devices or absolute or upward (..)
#   paths are refused before anything is unpacked.
# - Inputs come from a variable naming a local archive or folder (`recipe_fetch`): without it
#   the recipe says what to fetch, from where, and which variable to set, then exits 2; with
#   <VAR>_SHA256 set (file) or <VAR>_SHA256SUMS (folder, sha256sum -c format) the input is
#   checked before anything is written, and a mismatch exits 3.
# - `recipe_train_main` / `recipe_evaluate_main` implement train.sh / evaluate.sh from the
#   arrays a data set's script defines (see scripts/recipes/iwslt14_de_en/train.sh for the pattern).
#
# Environment every script honours:
#   DATA_ROOT        where prepared data goes (default <repo>/data)
#   CHECKPOINT_ROOT  where checkpoints and scores go (default <repo>/checkpoints)
#   PYTHON           the interpreter with fairseq installed (default <repo>/.venv/bin/python)
#   WORKERS          processes for tokenisation and fairseq-preprocess (default 4)

RECIPE_COMMON=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$RECIPE_COMMON/../../.." && pwd)
if [[ -z ${PYTHON:-} ]]; then
    if [[ -x $REPO_ROOT/.venv/bin/python ]]; then PYTHON=$REPO_ROOT/.venv/bin/python
    else PYTHON=$(command -v python3); fi
fi
FAIRSEQ_BIN=$(dirname "$PYTHON")
DATA_ROOT=${DATA_ROOT:-$REPO_ROOT/data}
CHECKPOINT_ROOT=${CHECKPOINT_ROOT:-$REPO_ROOT/checkpoints}
WORKERS=${WORKERS:-4}
USER_DIR=${USER_DIR:-$REPO_ROOT/relu_former}
RECIPE_NAME=${RECIPE_NAME:-$(basename "$(dirname "$0")")/$(basename "$0")}
RECIPE_TMP=()

recipe_log() { echo "[$RECIPE_NAME] $*" >&2; }

recipe_die() {  # recipe_die MESSAGE [EXIT_CODE]
    echo "[$RECIPE_NAME] error: $1" >&2
    exit "${2:-1}"
}

recipe_cleanup() {
    local dir
    for dir in "${RECIPE_TMP[@]+"${RECIPE_TMP[@]}"}"; do rm -rf -- "$dir"; done
}
trap recipe_cleanup EXIT
trap 'exit 130' INT TERM

# Print the script's usage ($RECIPE_USAGE) and exit when -h/--help comes before any `--`.
recipe_handle_help() {
    local arg
    for arg in "$@"; do
        [[ $arg == -- ]] && return 0
        if [[ $arg == -h || $arg == --help ]]; then
            printf '%s\n' "$RECIPE_USAGE"
            exit 0
        fi
    done
}

fairseq_cli() {  # fairseq_cli NAME: path of a fairseq console script of $PYTHON's install
    if [[ -x $FAIRSEQ_BIN/$1 ]]; then echo "$FAIRSEQ_BIN/$1"
    elif command -v "$1" >/dev/null; then command -v "$1"
    else recipe_die "$1 not found next to $PYTHON or on PATH: run 'make install' or set PYTHON"
    fi
}

recipe_python() {  # recipe_python ARGS...: run $PYTHON, or say how to get one
    [[ -x $PYTHON ]] || recipe_die "PYTHON=$PYTHON is not an executable interpreter: run \
'make install' or set PYTHON to the python of an environment with fairseq"
    PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" "$@"
}
# The recipes' Python helpers are modules of the repository's ``scripts`` package.
prepare_text() { recipe_python -m scripts.recipes.lib.prepare_text "$@"; }
corpus_formats() { recipe_python -m scripts.recipes.lib.corpus_formats "$@"; }

recipe_is_done() { [[ -f $1/.done ]]; }

# recipe_lock WORK: take the exclusive lock of the data set folder WORK for the rest of the
# script (inherited by its children, released when the last of them exits), or stop (exit 4)
# when another run holds it. Taking it again in the same script is a no-op.
RECIPE_LOCK_FD=
recipe_lock() {
    [[ -z $RECIPE_LOCK_FD ]] || return 0
    local work=$1 lockfile
    lockfile="$(dirname "$work")/.$(basename "$work").lock"
    mkdir -p "$(dirname "$work")"
    command -v flock >/dev/null || recipe_die "flock not found: install util-linux (it \
keeps two runs from preparing one data set at once)"
    exec {RECIPE_LOCK_FD}>>"$lockfile"
    if ! flock -n "$RECIPE_LOCK_FD"; then
        recipe_die "another run is preparing $work (it holds $lockfile): wait for it to \
finish, then run again; nothing was changed" 4
    fi
}

# recipe_step NAME DIR FUNCTION [ARGS...]: run FUNCTION once, atomically, output in $STEP_OUT.
recipe_step() {
    local name=$1 dir=$2
    shift 2
    if recipe_is_done "$dir"; then
        recipe_log "step $name: done already ($dir)"
        return 0
    fi
    mkdir -p "$(dirname "$dir")"
    recipe_lock "$(dirname "$dir")"
    # under the data set's lock no other run writes here: what is left is an interrupted run's
    rm -rf -- "$dir" "$dir".tmp.*
    local tmp
    tmp=$(mktemp -d "$dir.tmp.XXXXXXXX")
    RECIPE_TMP+=("$tmp")
    recipe_log "step $name: running"
    local start=$SECONDS
    STEP_OUT=$tmp "$@"
    touch "$tmp/.done"
    # -T: never move the folder into an existing one (a half-made DIR is an error, not a parent)
    mv -T "$tmp" "$dir" || recipe_die "cannot rename $tmp to $dir: remove $dir and run again"
    recipe_log "step $name: done in $((SECONDS - start)) s -> $dir"
}

recipe_sha256_check() {  # recipe_sha256_check PATH VAR: verify a file or folder if asked to
    local path=$1 var=$2 expected actual sums_var="${2}_SHA256SUMS" expected_var="${2}_SHA256"
    if [[ -f $path ]]; then
        expected=${!expected_var:-}
        if [[ -z $expected ]]; then
            recipe_log "no published SHA-256 for $(basename "$path"); set $expected_var to check it"
            return 0
        fi
        actual=$(sha256sum "$path" | cut -d' ' -f1)
        if [[ $actual != "$expected" ]]; then
            recipe_die "checksum mismatch for $path: sha256 $actual, expected $expected \
($expected_var). The file is corrupt or another version: fetch it again." 3
        fi
        recipe_log "sha256 of $(basename "$path") verified"
    elif [[ -n ${!sums_var:-} ]]; then
        (cd "$path" && sha256sum --quiet -c "${!sums_var}") >&2 || recipe_die \
            "checksum mismatch in $path against ${!sums_var} ($sums_var): fetch the files again" 3
        recipe_log "sha256 sums of $path verified"
    else
        recipe_log "no published SHA-256 sums for $path; set $sums_var to check it"
    fi
}

# recipe_unpack ARCHIVE DEST [PATTERNS...]: extract a .tgz/.tar/.zip, only the members that
# match PATTERNS (shell globs) when given. A pattern that matches nothing is not an error here
# (the content check of the fetch step says what is missing); any other failure is.
recipe_unpack() {
    local archive=$1 dest=$2 log status=0
    shift 2
    recipe_check_members "$archive"
    log=$(mktemp)
    case $archive in
        *.tgz|*.tar.gz|*.tar|*.tar.bz2|*.tar.xz)
            tar -xf "$archive" -C "$dest" ${1:+--wildcards} "$@" 2>"$log" || status=$?
            if ((status)) && grep -qv -e 'Not found in archive' -e 'Exiting with failure status' \
                    "$log"; then
                status=-1
            else
                status=0
            fi ;;
        *.zip)
            unzip -q -o "$archive" -d "$dest" "$@" >"$log" 2>&1 || status=$?
            ((status != 11)) || status=0 ;;  # 11: no member matched the patterns
        *) rm -f "$log"
           recipe_die "cannot unpack $archive: expected .tgz, .tar[.gz|.bz2|.xz] or .zip" 2 ;;
    esac
    if ((status)); then
        local message
        message=$(tail -n 3 "$log" | tr '\n' ' ')
        rm -f "$log"
        recipe_die "cannot unpack $archive ($message): is it complete? Fetch it again." 2
    fi
    rm -f "$log"
}

# recipe_check_members ARCHIVE: refuse (exit 2) an archive with a member that is a link
# (symbolic or hard), a device, a FIFO or a socket, or whose name is absolute or climbs out
# with "..": unpacked, such a member would put a file from elsewhere on this machine into a
# corpus (a link is followed when the corpus is read) or write outside the target folder.
recipe_check_members() {
    local archive=$1 listing names bad
    case $archive in
        *.zip)
            listing=$(unzip -Z "$archive" 2>/dev/null | sed '1,2d;$d') || listing=
            names=$(unzip -Z1 "$archive" 2>/dev/null) || names= ;;
        *.tgz|*.tar.gz|*.tar|*.tar.bz2|*.tar.xz)
            listing=$(tar -tvf "$archive" 2>/dev/null) || listing=
            names=$(tar -tf "$archive" 2>/dev/null) || names= ;;
        *) return 0 ;;
    esac
    # the first character of each long-listing line is the member's type
    bad=$(printf '%s\n' "$listing" | grep -E '^[lhcbps]' | head -n 1 || true)
    [[ -z $bad ]] || recipe_die "$archive holds a member that is a link or a device \
(${bad}): refused, nothing was unpacked. Use an archive of plain files (the published one)." 2
    bad=$(printf '%s\n' "$names" | grep -E '^/|(^|/)\.\.(/|$)' | head -n 1 || true)
    [[ -z $bad ]] || recipe_die "$archive holds a member with an absolute or '..' path \
($bad): refused, nothing was unpacked. Use an archive of plain files (the published one)." 2
}

_recipe_fetch_into() {
    local source=$1 entry
    shift
    if [[ -d $source ]]; then
        # a folder: archives in it are unpacked, everything else is linked (never copied)
        for entry in "$source"/*; do
            case $entry in
                *.tgz|*.tar.gz|*.tar|*.tar.bz2|*.tar.xz|*.zip) recipe_unpack "$entry" "$STEP_OUT" ;;
                *) ln -s "$(cd "$(dirname "$entry")" && pwd)/$(basename "$entry")" "$STEP_OUT/" ;;
            esac
        done
    else
        recipe_unpack "$source" "$STEP_OUT" "$@"
    fi
    _recipe_check_input
    _recipe_source_id "$source" >"$STEP_OUT/.source"
}

# The input's identity: name and size of the archive, or of each file of the folder.
_recipe_source_id() {
    if [[ -d $1 ]]; then (cd "$1" && find -L . -maxdepth 1 -type f -printf '%P %s\n' | LC_ALL=C sort)
    else find -L "$1" -maxdepth 0 -printf '%f %s\n'; fi
}

recipe_has_files() {  # recipe_has_files DIR NAME...: every NAME (a glob) is a file under DIR
    local name
    for name in "${@:2}"; do
        [[ -n $(find -L "$1" -name "$name" -type f -print -quit 2>/dev/null) ]] || return 1
    done
}

# The unpacked input must hold one of the RECIPE_EXPECT alternatives (each a space-separated
# list of file names or globs), else the fetch step fails and is not marked done.
_recipe_check_input() {
    local alternative names
    ((${#RECIPE_EXPECT[@]})) || return 0
    for alternative in "${RECIPE_EXPECT[@]}"; do
        read -r -a names <<<"$alternative"
        recipe_has_files "$STEP_OUT" "${names[@]}" && return 0
    done
    local wanted
    wanted=$(printf ' or [%s]' "${RECIPE_EXPECT[@]}")
    recipe_die "$FETCH_VAR=$FETCH_SOURCE is not the $FETCH_WHAT: it lacks the files \
${wanted# or }. Point $FETCH_VAR at the right archive or folder and run again. $FETCH_HOW" 2
}

# The variable names another input than the one DIR was fetched from. The new input is
# checked completely first (checksum, members, unpacked into DIR.next, expected files) and a
# bad one stops the script with the old data untouched. A good one replaces DIR only when
# nothing was prepared from DIR yet; a prepared data set (hours of work for WMT14) is never
# removed: the script stops, naming the variable and the folder to move away.
_recipe_fetch_another() {
    local dir=$1 var=$2 what=$3 how=$4 source=$5 work prepared
    shift 5
    work=$(dirname "$dir")
    recipe_log "$var=$source is another input than the one $work was prepared from: checking it"
    recipe_sha256_check "$source" "$var"
    recipe_lock "$work"
    rm -rf -- "$dir.next"  # a check of another input, interrupted after its rename
    FETCH_VAR=$var FETCH_SOURCE=$source FETCH_WHAT=$what FETCH_HOW=$how \
        recipe_step fetch "$dir.next" _recipe_fetch_into "$source" "$@"
    prepared=$(find "$work" -mindepth 2 -maxdepth 3 -name .done ! -path "$dir/.done" \
        ! -path "$dir.next/.done" -printf '%h\n' | LC_ALL=C sort | tr '\n' ' ')
    if [[ -n $prepared ]]; then
        rm -rf -- "$dir.next"
        recipe_die "$var=$source is another input than the one $work was prepared from \
($(tr '\n' ' ' <"$dir/.source" | sed 's/ $//')), and $work holds data prepared from that one \
(${prepared% }). Nothing was changed. To prepare the new input, move $work away (or delete it) \
and run again; to keep the prepared data, unset $var or point it at the original input." 2
    fi
    # only the fetch step was done: nothing is lost by replacing it
    rm -rf -- "$dir"
    mv -T "$dir.next" "$dir"
    recipe_log "step fetch: replaced by $source ($dir)"
}

# recipe_fetch DIR VAR WHAT HOW [MEMBERS...]: put the input named by $VAR (archive or folder)
# into DIR; MEMBERS limits what is unpacked from an archive. Before the step counts as done
# the input must hold the files RECIPE_EXPECT names (set it before calling). When DIR is done
# and $VAR names an input of another name or size than the one it came from, the new input is
# checked first and replaces DIR only if nothing was prepared from DIR yet; otherwise the script
# stops (exit 2), changing nothing (_recipe_fetch_another). From here on the data set folder
# is locked for this run (recipe_lock).
RECIPE_EXPECT=()
recipe_fetch() {
    local dir=$1 var=$2 what=$3 how=$4 source
    shift 4
    source=${!var:-}
    if recipe_is_done "$dir"; then
        if [[ -n $source && -e $source && -f $dir/.source ]] && \
                [[ $(_recipe_source_id "$source") != "$(<"$dir/.source")" ]]; then
            _recipe_fetch_another "$dir" "$var" "$what" "$how" "$source" "$@"
            return 0
        fi
        recipe_lock "$(dirname "$dir")"
        recipe_log "step fetch: done already ($dir)"
        return 0
    fi
    if [[ -z $source ]]; then
        recipe_die "no $what: set $var to its local path. Nothing can be downloaded from here; \
$how" 2
    fi
    [[ -e $source ]] || recipe_die "$var=$source does not exist. $how" 2
    recipe_sha256_check "$source" "$var"
    FETCH_VAR=$var FETCH_SOURCE=$source FETCH_WHAT=$what FETCH_HOW=$how \
        recipe_step fetch "$dir" _recipe_fetch_into "$source" "$@"
}

recipe_find() {  # recipe_find DIR NAME: the one file called NAME under DIR (links followed)
    local found
    found=$(find -L "$1" -name "$2" -type f -print -quit)
    [[ -n $found ]] || recipe_die "$2 not found in $1: is this the right archive?"
    echo "$found"
}

# recipe_split_every DIR EVERY OFFSET LANG...: DIR/train.all.LANG -> DIR/{train,valid}.LANG,
# line i to valid when i % EVERY == OFFSET (fairseq's "awk NR % N == 0" is OFFSET = N - 1).
recipe_split_every() {
    local dir=$1 every=$2 offset=$3 lang
    shift 3
    for lang in "$@"; do
        prepare_text split-every -i "$dir/train.all.$lang" --every "$every" --offset "$offset" \
            --kept "$dir/train.$lang" --taken "$dir/valid.$lang"
        rm "$dir/train.all.$lang"
    done
}

# recipe_bpe MERGES TEXT_DIR LANG...: joint BPE learnt on TEXT_DIR/train.LANG*, applied to
# every TEXT_DIR/{train,valid,test}.LANG; codes in $STEP_OUT/code. BPE_GLOSSARIES: words
# never split.
recipe_bpe() {
    local merges=$1 text=$2 lang split
    shift 2
    local train=() inputs=() outputs=() glossaries=()
    for lang in "$@"; do train+=("$text/train.$lang"); done
    prepare_text learn-bpe "${train[@]}" --codes "$STEP_OUT/code" --merges "$merges"
    for split in train valid test; do
        for lang in "$@"; do
            inputs+=("$text/$split.$lang")
            outputs+=("$STEP_OUT/$split.$lang")
        done
    done
    read -r -a glossaries <<<"${BPE_GLOSSARIES:-}"
    prepare_text apply-bpe --codes "$STEP_OUT/code" --inputs "${inputs[@]}" \
        --outputs "${outputs[@]}" --glossaries "${glossaries[@]+"${glossaries[@]}"}"
}

# recipe_binarize SRC TGT TEXT_DIR [fairseq-preprocess flags...]: $STEP_OUT gets data-bin.
recipe_binarize() {
    local src=$1 tgt=$2 text=$3
    shift 3
    "$(fairseq_cli fairseq-preprocess)" --source-lang "$src" --target-lang "$tgt" \
        --trainpref "$text/train" --validpref "$text/valid" --testpref "$text/test" \
        --destdir "$STEP_OUT" --workers "$WORKERS" "$@" >"$STEP_OUT/preprocess.log" 2>&1 || {
        tail -n 20 "$STEP_OUT/preprocess.log" >&2
        recipe_die "fairseq-preprocess failed (log above)"
    }
}

# ---------------------------------------------------------------------------- train.sh
# A data set's train.sh defines, then calls recipe_train_main "$@":
#   DATASET          name of the data set (checkpoints go to $CHECKPOINT_ROOT/$DATASET/MODEL)
#   DATA_BIN         binarized data folder
#   RECIPE_MODELS    the model names it supports
#   recipe_model_args MODEL   a function filling the array MODEL_ARGS (arch, criterion, ...)
#   TRAIN_ARGS       the paper's optimisation settings for the data set (array)
# Extra fairseq-train flags after `--` come last, so they override the defaults.
# LAUNCHER (e.g. "torchrun --nproc-per-node 8") is put in front of fairseq-train.
recipe_parse_model_args() {
    DRY_RUN=0
    MODEL=
    OVERRIDES=()
    while (($#)); do
        case $1 in
            --dry-run) DRY_RUN=1 ;;
            --) shift; OVERRIDES=("$@"); break ;;
            -*) recipe_die "unknown option $1 (see -h)" ;;
            *) [[ -z $MODEL ]] || recipe_die "one MODEL only, got '$MODEL' and '$1'"; MODEL=$1 ;;
        esac
        shift
    done
    [[ -n $MODEL ]] || recipe_die "give the model to run: one of ${RECIPE_MODELS[*]} (see -h)"
    local m
    for m in "${RECIPE_MODELS[@]}"; do [[ $m == "$MODEL" ]] && return 0; done
    recipe_die "unknown model '$MODEL' for $DATASET: choose one of ${RECIPE_MODELS[*]}"
}

recipe_print_command() { printf '%q ' "$@"; printf '\n'; }

recipe_train_main() {
    recipe_handle_help "$@"
    recipe_parse_model_args "$@"
    SAVE_DIR=${SAVE_DIR:-$CHECKPOINT_ROOT/$DATASET/$MODEL}
    MODEL_ARGS=()
    recipe_model_args "$MODEL"
    local launcher=()
    read -r -a launcher <<<"${LAUNCHER:-}"
    local cmd=("${launcher[@]+"${launcher[@]}"}" "$(fairseq_cli fairseq-train)" "$DATA_BIN"
               --user-dir "$USER_DIR" --save-dir "$SAVE_DIR" "${TRAIN_ARGS[@]}"
               "${MODEL_ARGS[@]}" "${OVERRIDES[@]+"${OVERRIDES[@]}"}")
    if ((DRY_RUN)); then
        recipe_print_command "${cmd[@]}"
        return 0
    fi
    recipe_is_done "$DATA_BIN" || [[ -f $DATA_BIN/dict.${SRC_LANG:-src}.txt ]] || \
        recipe_die "no prepared data in $DATA_BIN: run $(dirname "$0")/prepare.sh first"
    mkdir -p "$SAVE_DIR"
    recipe_log "training $MODEL: $(recipe_print_command "${cmd[@]}")"
    "${cmd[@]}" 2>&1 | tee -a "$SAVE_DIR/train.log"  # -a: a resumed run adds to the log
    [[ -f $SAVE_DIR/checkpoint_last.pt ]] || recipe_die "no checkpoint in $SAVE_DIR (train.log)"
    recipe_log "checkpoints: $SAVE_DIR (best: checkpoint_best.pt, log: $SAVE_DIR/train.log)"
}

# The models of the translation comparison: every translation data set's RECIPE_MODELS unless
# it sets its own.
TRANSLATION_MODELS=(transformer relu_former relu_former_softmax_cross sparsemax entmax15 rela
                    sparse_softmax)

# recipe_translation_defaults: DATA_BIN ($DATA_ROOT/$DATASET/data-bin) and RECIPE_MODELS
# (TRANSLATION_MODELS) of a translation data set, where its script did not set them; train.sh
# and evaluate.sh share them.
recipe_translation_defaults() {
    DATA_BIN=${DATA_BIN:-$DATA_ROOT/$DATASET/data-bin}
    [[ -n ${RECIPE_MODELS+set} ]] || RECIPE_MODELS=("${TRANSLATION_MODELS[@]}")
}

# recipe_translation_train_main SRC TGT LR WEIGHT_DECAY [FLAGS...] -- TRAIN_SH_ARGS...: the
# train.sh of a translation data set. The script sets DATASET, TRANSFORMER_ARCH and
# RELU_FORMER_ARCH first, and DATA_BIN or RECIPE_MODELS where they differ from the defaults
# (recipe_translation_defaults). The settings are the
# ReLUFormer paper's translation setting (its appendix A.2), the same for every model: dropout
# 0.1 on residual connections and on attention weights, shared source/target embeddings (the
# data sets use a joined dictionary), Adam (0.9, 0.98), inverse-sqrt with 4000 warm-up
# updates, 8192 tokens a batch on one GPU (--max-tokens BATCH_TOKENS x --update-freq
# UPDATE_FREQ, default 4096 x 2), 100k updates. LR and WEIGHT_DECAY are not given by the
# paper (each data set's script says where its values come from); FLAGS (e.g. position
# limits) are added.
recipe_translation_train_main() {
    SRC_LANG=$1
    local tgt=$2 lr=$3 weight_decay=$4 flags=()
    shift 4
    while (($#)) && [[ $1 != -- ]]; do flags+=("$1"); shift; done
    if (($#)); then shift; fi  # the --
    recipe_translation_defaults
    TRAIN_ARGS=(--task translation --source-lang "$SRC_LANG" --target-lang "$tgt"
                "${flags[@]+"${flags[@]}"}"
                --optimizer adam --adam-betas "(0.9, 0.98)" --clip-norm 0.0 --lr "$lr"
                --lr-scheduler inverse_sqrt --warmup-updates 4000 --warmup-init-lr 1e-07
                --dropout 0.1 --attention-dropout 0.1 --share-all-embeddings
                --weight-decay "$weight_decay" --max-tokens "${BATCH_TOKENS:-4096}"
                --update-freq "${UPDATE_FREQ:-2}"
                --max-update 100000 --keep-last-epochs 5)
    recipe_model_args() { recipe_seq2seq_model_args "$1"; }
    recipe_train_main "$@"
}

# recipe_seq2seq_model_args MODEL: the shared model presets. A data set sets TRANSFORMER_ARCH,
# RELU_FORMER_ARCH and, for pooling encoders, the associative array POOLING_ARCH (model name ->
# arch) before calling it. LABEL_SMOOTHING (0.1, every paper) and SPARSE_K (sparse-softmax's
# k in training, default 20 as the criterion) can be changed.
recipe_seq2seq_model_args() {
    local smoothing=(--label-smoothing "${LABEL_SMOOTHING:-0.1}")
    case $1 in
        transformer)
            MODEL_ARGS=(--arch "$TRANSFORMER_ARCH" --criterion label_smoothed_cross_entropy
                        "${smoothing[@]}") ;;
        relu_former)  # the paper's full-ReLU model: ReLU in all three attentions
            MODEL_ARGS=(--arch "$RELU_FORMER_ARCH" --attention-activation relu
                        --criterion regularized_label_smoothed_cross_entropy "${smoothing[@]}") ;;
        relu_former_softmax_cross)  # our hybrid: ReLU self-attention, softmax cross-attention
            MODEL_ARGS=(--arch "$RELU_FORMER_ARCH" --attention-activation relu
                        --cross-attention-activation softmax
                        --criterion regularized_label_smoothed_cross_entropy "${smoothing[@]}") ;;
        sparsemax|entmax15|rela)
            MODEL_ARGS=(--arch "$RELU_FORMER_ARCH" --attention-activation "$1"
                        --criterion label_smoothed_cross_entropy "${smoothing[@]}") ;;
        sparse_softmax)
            MODEL_ARGS=(--arch "$TRANSFORMER_ARCH" --criterion sparse_softmax_cross_entropy
                        --sparse-softmax-k "${SPARSE_K:-20}" "${smoothing[@]}") ;;
        *)
            [[ -n ${POOLING_ARCH[$1]:-} ]] || recipe_die "no preset for model $1"
            MODEL_ARGS=(--arch "${POOLING_ARCH[$1]}" --criterion label_smoothed_cross_entropy
                        "${smoothing[@]}") ;;
    esac
}

# recipe_generate_args MODEL: decoding flags of a model (sparse_softmax decodes with
# top-k sparse-softmax, SPARSE_DECODE_K kept, default 5 as the paper at beam 5).
recipe_generate_args() {
    if [[ $1 == sparse_softmax ]]; then
        MODEL_GENERATE_ARGS=(--task translation_sparse_decoding
                             --sparse-softmax-k "${SPARSE_DECODE_K:-5}")
    fi
}

# ---------------------------------------------------------------------------- evaluate.sh
# A data set's evaluate.sh defines DATASET, DATA_BIN, RECIPE_MODELS, GENERATE_ARGS (array:
# beam, length penalty, --remove-bpe/--post-process) and SCORE_ARGS (array for score.py),
# and may redefine recipe_generate_args MODEL (extra decoding flags for a model), then calls
# recipe_evaluate_main "$@". SUBSET (default test) and CHECKPOINT (default
# $SAVE_DIR/checkpoint_best.pt, else checkpoint_last.pt) choose what is scored.
recipe_evaluate_main() {
    recipe_handle_help "$@"
    recipe_parse_model_args "$@"
    SAVE_DIR=${SAVE_DIR:-$CHECKPOINT_ROOT/$DATASET/$MODEL}
    local subset=${SUBSET:-test} checkpoint=${CHECKPOINT:-}
    if [[ -z $checkpoint ]]; then
        checkpoint=$SAVE_DIR/checkpoint_best.pt
        [[ -f $checkpoint ]] || checkpoint=$SAVE_DIR/checkpoint_last.pt
    fi
    MODEL_GENERATE_ARGS=()
    recipe_generate_args "$MODEL"
    local generated=$SAVE_DIR/generate-$subset.txt results=${RESULTS:-$SAVE_DIR/score-$subset.json}
    # --required-batch-size-multiple 1: fairseq-fixed 0.12.3.1's compiled batch_by_size drops
    # the last sentences when they do not fill a multiple of 8 (measured: 16 of 20 decoded)
    local cmd=("$(fairseq_cli fairseq-generate)" "$DATA_BIN" --user-dir "$USER_DIR"
               --path "$checkpoint" --gen-subset "$subset" --required-batch-size-multiple 1
               "${GENERATE_ARGS[@]}"
               "${MODEL_GENERATE_ARGS[@]+"${MODEL_GENERATE_ARGS[@]}"}"
               "${OVERRIDES[@]+"${OVERRIDES[@]}"}")
    if ((DRY_RUN)); then
        recipe_print_command "${cmd[@]}"
        return 0
    fi
    [[ -f $checkpoint ]] || recipe_die "no checkpoint $checkpoint: run train.sh $MODEL first \
or set CHECKPOINT"
    recipe_log "decoding $subset with $checkpoint"
    local tmp
    tmp=$(mktemp "$generated.tmp.XXXXXXXX")
    RECIPE_TMP+=("$tmp")
    "${cmd[@]}" >"$tmp" 2>"$SAVE_DIR/generate-$subset.log" || {
        tail -n 20 "$SAVE_DIR/generate-$subset.log" >&2
        recipe_die "fairseq-generate failed (log above)"
    }
    mv "$tmp" "$generated"
    # the size fairseq loaded, so that the score covers every sentence of the subset
    local expected
    expected=$(sed -n 's/.*loaded \([0-9,]*\) examples from: .*/\1/;T;s/,//g;p;q' \
        "$SAVE_DIR/generate-$subset.log")
    recipe_python -m scripts.recipes.lib.score "$generated" "${SCORE_ARGS[@]}" --out "$results" \
        ${expected:+--expected-sentences "$expected"}
    recipe_log "hypotheses: $generated; scores: $results"
}

# recipe_translation_evaluate_main EVALUATE_SH_ARGS...: recipe_evaluate_main for a
# translation data set, with train.sh's DATA_BIN and RECIPE_MODELS (recipe_translation_defaults).
recipe_translation_evaluate_main() {
    recipe_translation_defaults
    recipe_evaluate_main "$@"
}
