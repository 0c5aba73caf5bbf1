#!/usr/bin/env bash
# `make bench-gpu` on a GPU host without network or exporter, from what
# tools/bench/gpu_stage.sh made on the development machine:
#
#   1. staging, one call per piece (a call carries at most 64 MiB, the
#      working tree included), each within the host's warm window of the
#      last:  carry [".gpu/stage/p.NN", ".gpu/stage/SHA256SUMS"],
#      command  mkdir -p /root/stage && cp .gpu/stage/* /root/stage/
#   2. the measuring call:  bash tools/bench/gpu_bench.sh
#      (both models of tools/bench/bench_nmt.py --gpu, three interleaved repeats;
#      the demo job on cuda:0 with its /metrics; if staged, the training
#      rows: LSTM and BLSTM, `paraforge train --device wgpu` against
#      PyTorch on cuda, tools/bench/bench_train.sh), leaving under $OUT:
#      bench-gpu-log.txt, nmt-gpu-*.json, demo-log.txt, demo-metrics.txt,
#      outputs.tar.gz (the translations), train-gpu.md, train-gpu.jsonl.
#      Untried on a GPU: give it a timeout_s of 600 and read the log.
#
# The joined pieces are checked against SHA256SUMS before anything is
# unpacked; a missing or damaged piece stops the run with exit 3.
# env: STAGE (/root/stage), REPEATS (3), SENTENCES (500)
set -uo pipefail
cd "$(dirname "$0")/../.."
S=${STAGE:-/root/stage}
X=$S/x
R=${OUT:-bench-out/gpu-host}
mkdir -p "$X" "$R"
if [ ! -f "$X/.unpacked" ]; then
  ls "$S"/p.* > /dev/null 2>&1 || { echo "gpu_bench: no pieces in $S (stage them first: see the head of $0)"; exit 3; }
  cat "$S"/p.* | sha256sum -c --quiet "$S/SHA256SUMS" \
    || { echo "gpu_bench: the pieces in $S do not join to the staged archive ($(ls "$S" | tr '\n' ' '))"; exit 3; }
  cat "$S"/p.* | xz -dc -T0 | tar -x -C "$X" || { echo "gpu_bench: unpacking failed"; exit 3; }
  touch "$X/.unpacked"
fi
NV=$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]) + "/nvidia")' 2>/dev/null || true)
# CTranslate2 opens libcublas.so.12 by name and looks up nine functions in
# it (cublas_stub.cc). Without CUDA 12's library staged (gpu_stage.sh
# CUBLAS12=1), that name points at the host's CUDA 13 cuBLAS, which has
# all nine; the log says which one ran, and a failure leaves CTranslate2's
# rows "not run" with the reason, never silently.
if [ ! -e "$X/cublas/libcublas.so.12" ]; then
  C13=$(find ${NV:-/nonexistent} /usr/local/cuda*/ -name 'libcublas.so.13*' 2>/dev/null | head -1)
  if [ -n "$C13" ]; then
    mkdir -p "$X/cublas" && ln -sf "$C13" "$X/cublas/libcublas.so.12"
    echo "gpu_bench: libcublas.so.12 -> $C13 (CUDA 13's cuBLAS under CTranslate2's name)"
    if command -v nm > /dev/null; then
      for f in cublasCreate_v2 cublasDestroy_v2 cublasGemmEx cublasGemmStridedBatchedEx cublasGetMathMode \
               cublasGetProperty cublasSetStream_v2 cublasSgemmStridedBatched cublasSgemm_v2; do
        nm -D --defined-only "$C13" | grep -q " $f\(@\|$\)" || echo "gpu_bench: $C13 lacks $f"
      done
    else
      echo "gpu_bench: no nm here to check its functions"
    fi
  fi
fi
export LD_LIBRARY_PATH=$X/cublas:$X${NV:+:$NV/cu13/lib:$NV/cudnn/lib}:${LD_LIBRARY_PATH:-}
export ORT_DYLIB_PATH=$(ls "$X"/libonnxruntime.so.1.* | head -1)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$X"/wheels/ctranslate2-*.whl \
  || echo "gpu_bench: no CTranslate2 wheel installed (its rows will say not run)"
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
# tools/bench/bench_nmt.py --prepared reads the models from .cache/bench/. On a
# development machine that is its own build: never replaced.
if [ -e .cache/bench ] && [ ! -L .cache/bench ]; then
  echo "gpu_bench: .cache/bench exists and is not this script's link (a development checkout?); not replacing it"
  exit 2
fi
mkdir -p .cache && rm -f .cache/bench && ln -s "$X/bench" .cache/bench
P=$X/paraforge
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.free --format=csv,noheader
  nproc
  "$P" --version
  timeout 420 python3 tools/bench/bench_nmt.py --gpu --prepared --paraforge "$P" --device cuda:0 \
    --repeats "${REPEATS:-3}" --sentences "${SENTENCES:-500}"
  BENCH_RC=$?
  echo "bench_nmt rc $BENCH_RC"
} > "$R/bench-gpu-log.txt" 2>&1
cp bench-out/nmt-gpu-*.json "$R/" 2>/dev/null

# The demo job on cuda:0 with the CUDA defaults, and its /metrics while it runs.
sed -e 's#^dir = .*#dir = ".cache/bench/demo-cs-en/onnx"#' -e '/^batch_size/d' -e '/^streams/d' \
    -e 's#^output = .*#output = "out/demo-gpu"#' -e 's#^local = .*#local = 1#' \
    pipeline-configs/demo.toml > /tmp/demo-gpu.toml
( sleep 7; timeout 10 python3 -c "import urllib.request as u; open('$R/demo-metrics.txt','wb').write(u.urlopen('http://127.0.0.1:9464/metrics').read())" ) > /dev/null 2>&1 &
rm -rf out/demo-gpu
timeout 90 "$P" run --config /tmp/demo-gpu.toml --gpus 0 > "$R/demo-log.txt" 2>&1
DEMO_RC=$?
echo "demo job rc $DEMO_RC (_SUCCESS: $([ -f out/demo-gpu/_SUCCESS ] && echo yes || echo no))" >> "$R/bench-gpu-log.txt"
wait
tar -czf "$R/outputs.tar.gz" bench-out/nmt-gpu-*/*.out.txt 2>/dev/null
cat "$R/bench-gpu-log.txt"

# Training on the GPU: paraforge's wgpu backend (Vulkan) against PyTorch on
# CUDA, same pairs, one epoch each (tools/bench/bench_train.sh).
TRAIN_RC=skipped
if [ -x "$X/paraforge-wgpu" ]; then
  if ! /sbin/ldconfig -p 2>/dev/null | grep -q libvulkan.so.1; then
    for f in "$X"/debs/*.deb; do dpkg -x "$f" /; done
    /sbin/ldconfig
  fi
  for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json; do
    [ -f "$icd" ] && export VK_DRIVER_FILES=$icd && break
  done
  export ORT_DYLIB_PATH
  PARAFORGE_BIN=$X/paraforge-wgpu MAKE_ROWS=$X/make_rows DEVICE=wgpu TORCH_DEVICE=cuda PYTHON=python3 \
    AVG_MODELS= NN_MODELS="lstm blstm" timeout 240 tools/bench/bench_train.sh 100000 > "$R/train-gpu.md" 2>&1
  TRAIN_RC=$?
  cp bench-out/train/results.jsonl "$R/train-gpu.jsonl" 2>/dev/null
  echo "training rc $TRAIN_RC (VK_DRIVER_FILES=${VK_DRIVER_FILES:-unset})" >> "$R/bench-gpu-log.txt"
  cat "$R/train-gpu.md"
fi
# Fails where a part failed: a benchmark that did not run is no figure.
[ "$BENCH_RC" = 0 ] && [ "$DEMO_RC" = 0 ] && { [ "$TRAIN_RC" = 0 ] || [ "$TRAIN_RC" = skipped ]; }
