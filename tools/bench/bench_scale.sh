#!/usr/bin/env bash
# `make bench-scale LINES=N`: every stage of a corpus at N input lines on
# this machine, each under /usr/bin/time -v, printing wall time, peak
# resident memory and bytes on disk per stage as a Markdown table.
#
#   input        N distinct CzEng 1.6 lines from the bundled real pairs
#                (tools/bench/make_scale_input.py: copy k carries " k" on every side)
#   plan         `paraforge plan`: the line scan, shards and fingerprints
#   plan+dedup   the same with `[filters] dedup_sources` (the job-wide pass)
#   pairs        the same N pairs translated already (the demo model's
#                translations of the sample, varied the same way)
#   job          `paraforge run` on them: coordinator and 2 local workers,
#                [filters] with dedup, the bundled scorer, Parquet
#   bin          deciles of para_score and trigram_overlap, --dedup, and the
#                paper's training sample of TRAIN_PAIRS pairs
#   report       `paraforge report`
#   rescore      `paraforge rescore --model models/scorer-trigram`
#   train-word   WORD (GloVe start), one epoch on the training sample
#   train-trigram TRIGRAM, one epoch on the training sample
#
# Nothing is translated at scale (a 2-core machine translates a few dozen
# sentences a second): the demo model translates the 4,068-line sample once
# (cached under .cache/bench-scale) and the job scores translations that
# exist, which is what every stage but translation does at any size.
# Work files go to WORK (default .cache/bench-scale/run-N) and are removed
# at the end unless KEEP=1 (KEEP_PAIRS=1 keeps the pairs input alone, for
# tools/bench/coordinator_shape.sh).
set -euo pipefail

LINES=${1:-${LINES:-1000000}}
BIN=${PARAFORGE:-target/release/paraforge}
PY=${PYTHON:-python3}
CACHE=.cache/bench-scale
WORK=${WORK:-$CACHE/run-$LINES}
SHARD=${SHARD_PAIRS:-50000}
TRAIN_PAIRS=${TRAIN_PAIRS:-5000000}
SAMPLE=data/sample/czeng16-heldout.cs-en.tsv
# The training sample is drawn from the top two para_score deciles.
if (( TRAIN_PAIRS > LINES / 10 )); then TRAIN_PAIRS=$(( LINES / 10 > 0 ? LINES / 10 : 1 )); fi

mkdir -p "$CACHE"
rm -rf "$WORK"
mkdir -p "$WORK"
echo "bench-scale: $LINES lines, shards of $SHARD, training sample $TRAIN_PAIRS, $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
echo "  $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); $(free -g | awk '/Mem:/ {print $2}') GiB RAM; $($BIN --version 2>/dev/null || echo paraforge)"

# The sample's translations, once: `score TAB translation` per line.
TRANS=$CACHE/sample-translations.tsv
if [[ ! -s $TRANS ]]; then
    echo "translating the $(wc -l < $SAMPLE)-line sample once with models/demo-cs-en (beam 4)..."
    cut -f3 "$SAMPLE" > "$CACHE/sample.cs"
    "$BIN" translate --model models/demo-cs-en --beam 4 --batch-size 32 --max-new-tokens 96 \
        --scores -o "$TRANS.tmp" "$CACHE/sample.cs"
    mv "$TRANS.tmp" "$TRANS"
fi

ROWS=()
# stage NAME WHAT-ON-DISK COMMAND...: runs it under /usr/bin/time -v.
stage() {
    local name=$1 disk=$2
    shift 2
    local t=$WORK/time-$name.txt
    echo "== $name: $*"
    if ! /usr/bin/time -v -o "$t" "$@" > "$WORK/$name.out" 2> "$WORK/$name.err"; then
        echo "stage $name FAILED:"
        tail -20 "$WORK/$name.err"
        cat "$t" 2>/dev/null | head -3
        exit 1
    fi
    local wall rss bytes
    wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$t")
    rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$t")
    bytes=0
    if [[ $disk != - && -e $disk ]]; then bytes=$(du -sb "$disk" | cut -f1); fi
    tail -3 "$WORK/$name.out" | sed 's/^/   /'
    ROWS+=("$(printf '| %s | %s | %s MiB | %s MB |' "$name" "$wall" "$(( rss / 1024 ))" "$(( bytes / 1000000 ))")")
    echo "   wall $wall, peak RSS $(( rss / 1024 )) MiB, on disk $(( bytes / 1000000 )) MB"
}

CZENG=$WORK/czeng.tsv
PAIRS=$WORK/pairs.tsv
stage input "$CZENG" "$PY" tools/bench/make_scale_input.py --sample "$SAMPLE" --lines "$LINES" --czeng "$CZENG"

plan_toml() { # $1 = extra [filters] lines
    cat <<EOF
[job]
name = "scale-plan"
output = "$WORK/plan-out"
shard_pairs = $SHARD

[input]
paths = ["$CZENG"]
format = "czeng16"

[model]
dir = "models/demo-cs-en"

[filters]
$1
EOF
}
plan_toml "" > "$WORK/plan.toml"
plan_toml "dedup_sources = true" > "$WORK/plan-dedup.toml"
stage plan - "$BIN" plan --config "$WORK/plan.toml" --json
stage plan+dedup - "$BIN" plan --config "$WORK/plan-dedup.toml" --json
[[ ${KEEP:-0} == 1 ]] || rm -f "$CZENG"

stage pairs "$PAIRS" "$PY" tools/bench/make_scale_input.py --sample "$SAMPLE" --translations "$TRANS" \
    --lines "$LINES" --pairs "$PAIRS"
cat > "$WORK/job.toml" <<EOF
[job]
name = "scale"
output = "$WORK/out"
shard_pairs = $SHARD
lease_seconds = 300

[input]
paths = ["$PAIRS"]
format = "pairs"
id_column = 0
reference_column = 1
translation_column = 2
translation_score_column = 3

[filters]
drop_copies = true
dedup_sources = true

[scoring]
model = "models/scorer-trigram"

[coordinator]
listen = "127.0.0.1:0"
metrics = "127.0.0.1:0"

[workers]
local = 2
EOF
stage job "$WORK/out" "$BIN" run --config "$WORK/job.toml"
[[ ${KEEP:-0} == 1 || ${KEEP_PAIRS:-0} == 1 ]] || rm -f "$PAIRS"

stage bin "$WORK/bins" "$BIN" bin --data "$WORK/out" --out "$WORK/bins" \
    --deciles para_score,trigram_overlap --dedup --train-sample "$TRAIN_PAIRS"
stage report "$WORK/report" "$BIN" report --data "$WORK/out" --out "$WORK/report"
stage rescore "$WORK/rescored" "$BIN" rescore --data "$WORK/out" --out "$WORK/rescored" \
    --model models/scorer-trigram
[[ ${KEEP:-0} == 1 ]] || rm -rf "$WORK/rescored"
stage train-word "$WORK/word.pfe" "$BIN" train --model word --data "$WORK/bins/train" --epochs 1 \
    --init-vectors data/vectors/glove.6B.50d.top25k.txt.gz --out "$WORK/word.pfe"
stage train-trigram "$WORK/trigram.pfe" "$BIN" train --model trigram --data "$WORK/bins/train" \
    --epochs 1 --out "$WORK/trigram.pfe"

echo
echo "| stage | wall (h:mm:ss) | peak RSS | on disk |"
echo "|---|---:|---:|---:|"
printf '%s\n' "${ROWS[@]}"
if [[ ${KEEP:-0} == 1 ]]; then :
elif [[ ${KEEP_PAIRS:-0} == 1 ]]; then find "$WORK" -mindepth 1 -maxdepth 1 ! -name pairs.tsv -exec rm -rf {} +
else rm -rf "$WORK"; fi
