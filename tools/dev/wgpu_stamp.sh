#!/usr/bin/env bash
# Prints one digest of what the wgpu training build compiles differently
# from the default one: the lock file, the manifests that name the feature
# and every tracked .rs file that mentions wgpu. `make check-wgpu` writes it
# to .ci/wgpu-checked when its lint passes; .ci/run lints the wgpu build
# again only when the digest differs (docs/development.md, "Build time").
set -euo pipefail
cd "$(dirname "$0")/../.."
{
  printf '%s\n' Cargo.lock Cargo.toml cli/Cargo.toml trainer/Cargo.toml tests/Cargo.toml
  git grep -l -e wgpu -- '*.rs'
} | sort -u | while read -r f; do
  printf '== %s\n' "$f"
  cat "$f"
done | sha256sum | cut -d' ' -f1
