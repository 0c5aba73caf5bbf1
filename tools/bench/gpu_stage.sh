#!/usr/bin/env bash
# Everything `make bench-gpu` needs on a GPU host that has no network and no
# exporter, made here and cut into pieces small enough to carry one per
# call (docs/bench/HISTORY.md, "GPU"; tools/bench/gpu_bench.sh runs them there):
#
#   - the release `paraforge` (stripped);
#   - ONNX Runtime's CUDA build (libonnxruntime*.so of the onnxruntime-gpu
#     wheel, `make ort ORT_WHEEL=onnxruntime-gpu`);
#   - CTranslate2's wheel for the host's Python (it opens libcublas.so.12 at
#     run time and looks up nine functions by name, all of which CUDA 13's
#     cuBLAS keeps: gpu_bench.sh points that name at the host's CUDA 13
#     library; CUBLAS12=1 also stages CUDA 12's own cuBLAS, whose
#     libcublasLt.so.12 alone is 397 MB compressed);
#   - for the training rows (TRAIN=0 leaves them out): the wgpu build of
#     `paraforge` (`train --device wgpu`, burn's wgpu backend on the GPU's
#     Vulkan driver; built into target/wgpu), the examples' `make_rows`, and
#     Debian's Vulkan loader (libvulkan1) in case the host lacks one;
#   - both benchmark models (tools/bench/bench_nmt.py --gpu --build-only): the demo
#     model's fp32 and fp16 graphs, checkpoint and CTranslate2 conversions,
#     and opus-mt-cs-en's shape with sign weights (its graphs compress; normal
#     random weights do not).
#
# Output: .gpu/stage/p.NN (PIECE_MB each, default 53: what went through on
# 2026-11-27) and .gpu/stage/SHA256SUMS
# (the joined archive's checksum, which gpu_bench.sh checks before it unpacks).
#
# usage: tools/bench/gpu_stage.sh      env: PIECE_MB (53), PYVER (3.12, the host's), CUBLAS12 (0), TRAIN (1)
set -euo pipefail
cd "$(dirname "$0")/../.."
PIECE_MB=${PIECE_MB:-53}
PYVER=${PYVER:-3.12}
ST=.gpu/stage
B=.gpu/build
rm -rf "$ST" "$B"
mkdir -p "$ST" "$B/bench" "$B/wheels"

make venv build
make ort ORT_WHEEL=onnxruntime-gpu
.venv/bin/python tools/bench/bench_nmt.py --gpu --build-only --paraforge target/release/paraforge

strip -o "$B/paraforge" target/release/paraforge
if [ "${TRAIN:-1}" = 1 ]; then
  cargo build --release -p paraforge --features paraforge/wgpu --target-dir target/wgpu
  cargo build --release -p paraforge-dataset --examples
  strip -o "$B/paraforge-wgpu" target/wgpu/release/paraforge
  strip -o "$B/make_rows" target/release/examples/make_rows
  mkdir -p "$B/debs"
  (cd "$B/debs" && apt-get download libvulkan1)
fi
cp .cache/ort/onnxruntime-gpu-*/libonnxruntime*.so* "$B/"
CT2=$(.venv/bin/python -c 'import ctranslate2; print(ctranslate2.__version__)')
PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64)
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
  "${PLAT[@]}" -d "$B/wheels" "ctranslate2==$CT2"
if [ "${CUBLAS12:-0}" = 1 ]; then
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
    "${PLAT[@]}" -d "$B/wheels" "nvidia-cublas-cu12"
  # Only cuBLAS's libraries from its wheel (the headers and static parts are
  # not needed at run time).
  mkdir -p "$B/cublas"
  (cd "$B/cublas" && unzip -q -j ../wheels/nvidia_cublas_cu12-*.whl 'nvidia/cublas/lib/libcublas*.so*')
  rm "$B"/wheels/nvidia_cublas_cu12-*.whl
fi

# The models, as tools/bench/bench_nmt.py --prepared reads them from .cache/bench/.
for m in demo-cs-en opus-mt-cs-en-signs; do
  mkdir -p "$B/bench/$m"
  for d in onnx onnx-fp16 hf ct2-fp16 ct2-int8-fp16 ct2-fp32; do
    [ -d ".cache/bench/$m/$d" ] && cp -r ".cache/bench/$m/$d" "$B/bench/$m/"
  done
done
# The opus shape's checkpoint is not read there (no transformers peer with
# random weights), only its tokenizer; the int8 graphs are the CPU's.
rm -f "$B"/bench/opus-mt-cs-en-signs/hf/model.safetensors "$B"/bench/*/onnx/*_quantized.onnx

tar -C "$B" -cf - . | xz -T0 -6 > .gpu/stage.tar.xz
(cd .gpu && sha256sum stage.tar.xz | sed 's/stage.tar.xz/-/' > stage/SHA256SUMS)
split -b "${PIECE_MB}M" -d -a 2 .gpu/stage.tar.xz "$ST/p."
rm .gpu/stage.tar.xz
ls -l "$ST"
echo "gpu_stage: $(ls "$ST"/p.* | wc -l) pieces in $ST; carry each with its own call, then run tools/bench/gpu_bench.sh (see its head)"
