#!/usr/bin/env bash
# Stages the build context of a paraforge image and builds it: what
# `make image` and `make image-cuda` run, and the tests with a debug binary.
#
#   deploy/docker/build.sh cpu|cuda TAG
#
# Environment (defaults for a repository checkout after `make build` and
# `make ort` / `make ort ORT_WHEEL=onnxruntime-gpu`):
#   PARAFORGE_BIN  the binary to copy in (target/release/paraforge)
#   ORT_DIR        the directory tools/dev/extract_ort.py filled from the wheel
#                  (.cache/ort/onnxruntime-1.31.1, or onnxruntime-gpu-1.31.1
#                  for cuda)
#   BASE           the base image (default: the Dockerfile's ARG BASE,
#                  debian:bookworm-slim or the CUDA 13 cuDNN runtime); for
#                  an air-gapped site, the image deploy/docker/debian-base.sh
#                  builds: localhost/paraforge-base:bookworm
#   CONTAINER      the container client and its options (podman; docker
#                  works the same; "podman --storage-driver vfs" where
#                  overlay mounts are not allowed)
#
# The image does not compile Rust: it copies the binary built on this host
# (no Rust toolchain image could be pulled where these were made), so the
# base's glibc must be new enough for it (2.34 when built on Debian 12).
set -euo pipefail

kind=${1:?usage: build.sh cpu|cuda TAG}
tag=${2:?usage: build.sh cpu|cuda TAG}
repo=$(cd "$(dirname "$0")/../.." && pwd)
ort_version=1.31.1
case $kind in
    cpu)  dockerfile=$repo/deploy/docker/Dockerfile; wheel=onnxruntime ;;
    cuda) dockerfile=$repo/deploy/docker/Dockerfile.cuda; wheel=onnxruntime-gpu ;;
    *) echo "build.sh: cpu or cuda, not $kind" >&2; exit 2 ;;
esac
bin=${PARAFORGE_BIN:-$repo/target/release/paraforge}
ort=${ORT_DIR:-$repo/.cache/ort/$wheel-$ort_version}
CONTAINER=${CONTAINER:-podman}

[ -x "$bin" ] || { echo "build.sh: no binary at $bin (make build)" >&2; exit 1; }
[ -f "$ort/libonnxruntime.so.$ort_version" ] || {
    echo "build.sh: no libonnxruntime.so.$ort_version in $ort (make ort ORT_WHEEL=$wheel)" >&2; exit 1; }
if [ "$kind" = cuda ] && [ ! -f "$ort/libonnxruntime_providers_cuda.so" ]; then
    echo "build.sh: $ort has no libonnxruntime_providers_cuda.so: is it the onnxruntime-gpu wheel's?" >&2
    exit 1
fi

ctx=$(mktemp -d "${TMPDIR:-/var/tmp}/paraforge-image.XXXXXX")
trap 'rm -rf "$ctx"' EXIT

# The binary without its debug sections (the release profile keeps line
# tables for backtraces on the host; symbols stay, so do function names).
cp "$bin" "$ctx/paraforge"
if command -v strip >/dev/null; then strip --strip-debug "$ctx/paraforge"; fi

mkdir -p "$ctx/onnxruntime"
cp "$ort/libonnxruntime.so.$ort_version" "$ort/libonnxruntime_providers_shared.so" "$ctx/onnxruntime/"
if [ "$kind" = cuda ]; then
    cp "$ort/libonnxruntime_providers_cuda.so" "$ctx/onnxruntime/"
fi

home=$ctx/paraforge-home
mkdir -p "$home/data"
cp -r "$repo/models" "$repo/pipeline-configs" "$home/"
cp -r "$repo/data/sample" "$repo/data/vectors" "$repo/data/README.md" "$home/data/"

args=(build -f "$dockerfile" -t "$tag")
if [ -n "${BASE:-}" ]; then args+=(--build-arg "BASE=$BASE"); fi
echo "build.sh: $CONTAINER ${args[*]} (context $(du -sh "$ctx" | cut -f1))"
# shellcheck disable=SC2086  # CONTAINER may carry options
$CONTAINER "${args[@]}" "$ctx"
echo "build.sh: built $tag"
