#!/usr/bin/env bash
# The first release build a newcomer waits for: a fresh clone of COMMIT
# (default HEAD) built with an empty target directory and the registry
# already downloaded (network time is not the code's), timed, with cargo's
# per-crate timings; the binary is kept beside them. Usage: tools/bench/build_time.sh [COMMIT] [OUT_DIR]
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
commit="$(git -C "$repo" rev-parse "${1:-HEAD}")"
out="${2:-$repo/bench-out/build-time}"
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git clone -q "$repo" "$work/src"
git -C "$work/src" checkout -q "$commit"
cd "$work/src"
cargo fetch -q
start=$(date +%s)
CARGO_TARGET_DIR="$work/target" cargo build --release -p paraforge --timings 2>&1 | tail -3
end=$(date +%s)
secs=$((end - start))
cp "$work"/target/cargo-timings/cargo-timing.html "$out/cargo-timing-${commit:0:8}.html"
# Kept to compare what two commits' binaries do (e.g. make demo's output).
cp "$work"/target/release/paraforge "$out/paraforge-${commit:0:8}"
printf 'commit %s: fresh release build of paraforge in %d min %02d s on %s cores (%s)\n' \
  "${commit:0:8}" $((secs / 60)) $((secs % 60)) "$(nproc)" "$(date -u +%Y-%m-%d)" | tee -a "$out/build-time.txt"
