#!/usr/bin/env bash
# The bundled paraphraser, models/paraphrase-en: an English-to-English
# MarianMT model trained on a corpus output's (reference -> translation)
# pairs (Wieting and Gimpel, 2018, section 6), exported to ONNX and run by
# the same beam-search engine as the translation models.
#
#   tools/models/paraphraser.sh CORPUS [OUT]
#
# CORPUS is a finished `paraforge run` output; pairs are kept with
# para_score >= MIN_PARA (0.6: the ranges that Table 3 of the paper finds
# mostly paraphrases), trigram_overlap <= MAX_TRIGRAM (0.7: near copies
# teach only copying), both sides at most 30 tokens (as the paper's
# training data) and the best candidate of each source only. Held-out ids (tools/models/marian_model.py HELD_OUT_PREFIXES)
# are never trained on. Needs `make venv` (torch, transformers) and the
# release binary. Steps and logs under .cache/paraphrase; the model in OUT
# (default models/paraphrase-en).
set -euo pipefail
cd "$(dirname "$0")/../.."

CORPUS=${1:?usage: tools/models/paraphraser.sh CORPUS [OUT]}
OUT=${2:-models/paraphrase-en}
MIN_PARA=${MIN_PARA:-0.6}
MAX_TRIGRAM=${MAX_TRIGRAM:-0.7}
MINUTES=${MINUTES:-60}
# bf16 autocast halves a step on CPUs with AVX512-BF16 or AMX and is many
# times slower without them: BF16=--bf16 to use it.
BF16=${BF16:-}
WORK=${WORK:-.cache/paraphrase}
PY=.venv/bin/python
BIN=${PARAFORGE:-target/release/paraforge}
export ORT_DYLIB_PATH=${ORT_DYLIB_PATH:-$PWD/.cache/ort/onnxruntime-1.31.1/libonnxruntime.so.1.31.1}

mkdir -p "$WORK"
rm -rf "$WORK/filtered"
"$BIN" filter --data "$CORPUS" --out "$WORK/filtered" \
  --min para_score="$MIN_PARA" --max trigram_overlap="$MAX_TRIGRAM" --max-tokens 30 \
  --max candidate_rank=1

# CzEng layout (id, score, input, output) for the training tool.
"$PY" - "$WORK/filtered" "$WORK/pairs.tsv" <<'EOF'
import sys
import pyarrow.dataset as ds
t = ds.dataset(sys.argv[1], format="parquet").to_table(
    columns=["id", "para_score", "reference", "translation"])
with open(sys.argv[2], "w", encoding="utf-8") as f:
    for r in t.to_pylist():
        ref, tr = (" ".join(r[k].split()) for k in ("reference", "translation"))
        f.write(f"{r['id']}\t{r['para_score']:.4f}\t{ref}\t{tr}\n")
print(f"{t.num_rows} pairs -> {sys.argv[2]}")
EOF

"$PY" tools/models/marian_model.py train --bitext "$WORK/pairs.tsv" --out "$WORK/train" \
  --direction en-en --d-model 256 --layers 3 --heads 4 --ffn 1024 --vocab 8000 \
  --max-positions 256 --lr 0.0007 --warmup 1000 $BF16 --minutes "$MINUTES" \
  --save-every 15 --resume 2>&1 | tee -a "$WORK/training.log"

rm -rf "$WORK/export"
"$PY" tools/models/marian_model.py export --model "$WORK/train/hf" --out "$WORK/export" --merged no --quantize
# Built beside OUT and swapped in at the end: a failed step leaves the
# model that was there.
rm -rf "$WORK/model" && mkdir -p "$WORK/model"
"$PY" tools/models/requantize.py weight-only "$WORK/export" "$WORK/model"
cp "$WORK/training.log" "$WORK/model/training.log"
(cd "$WORK/model" && rm -f encoder_model.onnx decoder_model.onnx decoder_with_past_model.onnx &&
  sha256sum config.json generation_config.json tokenizer_config.json vocab.json source.spm target.spm \
    *_quantized.onnx > SHA256SUMS)
[ -f "$OUT/README.md" ] && cp "$OUT/README.md" "$WORK/model/README.md"
rm -rf "$OUT" && mkdir -p "$(dirname "$OUT")" && mv "$WORK/model" "$OUT"
du -sh "$OUT"
