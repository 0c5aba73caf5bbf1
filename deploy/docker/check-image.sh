#!/usr/bin/env bash
# Builds the CPU image from a given binary and runs it: `paraforge --version`
# and `paraforge translate` of a file with the bundled tiny-cs-en model.
# tests/deploy.rs runs it and compares the results with the binary's own.
#
#   deploy/docker/check-image.sh OUTDIR     (reads OUTDIR/input.cs; writes
#                                           version.txt, translation.txt, image.txt)
#
# Environment:
#   PARAFORGE_BIN   the binary to put in the image (required)
#   ORT_DIR         the extracted onnxruntime wheel (default: the directory
#                   of $ORT_DYLIB_PATH)
#   IMAGE_BASE      the base image (default localhost/paraforge-base:bookworm,
#                   built with debian-base.sh when missing and possible)
#
# Exits 77, with a line "SKIPPED: reason" last on standard output, when
# podman is not installed, cannot run containers here, or there is no base
# image and none can be built.
#
# Podman on this project's build machines (a sandbox with cgroup v1 and a
# cgroup2 mount, and a low hard limit on open files) fails to start
# containers with its defaults: crun refuses "cgroups in hybrid mode" and
# both runtimes fail to raise RLIMIT_NOFILE/RLIMIT_NPROC to podman's
# defaults. What works there is runc (Debian package runc) and ulimits
# within the host's, through a containers.conf:
#   [containers]
#   default_ulimits = ["nofile=N:N", "nproc=4096:4096"]   # N = `ulimit -Hn`
#   [engine]
#   runtime = "runc"
# deploy/docker/containers.conf is that file with N = 4096. This script
# tries podman as configured first; when that fails it uses the shipped
# file (CONTAINERS_CONF) if runc is installed and `ulimit -Hn` allows 4096,
# else writes one from the host's limit into OUTDIR. Storage: the default
# overlay driver worked there, as root; elsewhere "--storage-driver vfs" in
# CONTAINER (see build.sh) is the slow, always-working fallback.
set -uo pipefail

out=${1:?usage: check-image.sh OUTDIR}
repo=$(cd "$(dirname "$0")/../.." && pwd)
skip() { echo "SKIPPED: $*"; exit 77; }

command -v podman >/dev/null || skip "podman is not installed (apt-get install podman)"
[ -n "${PARAFORGE_BIN:-}" ] || { echo "check-image.sh: set PARAFORGE_BIN" >&2; exit 2; }
export ORT_DIR=${ORT_DIR:-$(dirname "${ORT_DYLIB_PATH:?set ORT_DIR or ORT_DYLIB_PATH}")}
base=${IMAGE_BASE:-localhost/paraforge-base:bookworm}
tag=localhost/paraforge-check:$$
export CONTAINER=podman

if ! podman image exists "$base"; then
    [ "$(id -u)" = 0 ] || skip "no base image $base, and building one with debootstrap needs root"
    command -v debootstrap >/dev/null || skip "no base image $base and no debootstrap to build one (apt-get install debootstrap)"
    echo "check-image.sh: building the base image $base with debootstrap (a few minutes)"
    "$repo/deploy/docker/debian-base.sh" "$base" || skip "could not build the base image $base with debootstrap (see above; no Debian mirror reachable?)"
fi

runs() { podman run --rm "$base" true >"$out/probe.err" 2>&1; }
if ! runs; then
    echo "check-image.sh: podman cannot start a container as configured: $(tail -n 1 "$out/probe.err")"
    nofile=$(ulimit -Hn)
    [ "$nofile" = unlimited ] && nofile=1048576
    shipped=$repo/deploy/docker/containers.conf
    if command -v runc >/dev/null && [ "$nofile" -ge 4096 ]; then
        conf=$shipped
    else
        conf=$out/containers.conf
        {
            echo '[containers]'
            echo "default_ulimits = [\"nofile=$nofile:$nofile\", \"nproc=4096:4096\"]"
            if command -v runc >/dev/null; then echo '[engine]'; echo 'runtime = "runc"'; fi
        } >"$conf"
    fi
    export CONTAINERS_CONF=$conf
    settings=$(grep -v '^#' "$conf" | tr -s '\n' ' ')
    runs || skip "podman cannot start containers here, also with $conf ($settings): $(tail -n 1 "$out/probe.err")"
    echo "check-image.sh: using $conf ($settings)"
fi

cleanup() { podman rmi -f "$tag" >/dev/null 2>&1 || true; }
trap cleanup EXIT

BASE=$base "$repo/deploy/docker/build.sh" cpu "$tag" || { echo "check-image.sh: the build failed" >&2; exit 1; }
size=$(podman image inspect --format '{{.Size}}' "$tag")
echo "$tag $size" >"$out/image.txt"
echo "check-image.sh: $tag is $((size / 1000000)) MB"

podman run --rm "$tag" --version >"$out/version.txt" || { echo "check-image.sh: --version failed" >&2; exit 1; }
podman run --rm -i "$tag" translate --model models/tiny-cs-en --beam 2 --threads 1 \
    <"$out/input.cs" >"$out/translation.txt" || { echo "check-image.sh: translate failed" >&2; exit 1; }
echo "check-image.sh: --version and translate ran in $tag"
