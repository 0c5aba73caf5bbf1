#!/usr/bin/env bash
# Builds a minimal Debian base image with debootstrap and imports it into
# podman (or docker), for sites that cannot pull images from a registry:
# the paraforge Dockerfiles then build FROM it (make image
# IMAGE_BASE=localhost/paraforge-base:bookworm). The tests build it when
# podman and debootstrap are there and the image is not.
#
#   deploy/docker/debian-base.sh [TAG]     (default localhost/paraforge-base:bookworm)
#
# Environment:
#   SUITE      Debian release (default bookworm)
#   MIRROR     Debian mirror URL (default: debootstrap's own); a local mirror
#              or apt proxy works for an air-gapped site
#   CONTAINER  the container client and its options (default podman), e.g.
#              "podman --storage-driver vfs" where overlay is not available
#
# Needs root (debootstrap creates device nodes and chowns files) and the
# debootstrap and debian-archive-keyring packages. The image is Debian's
# minbase variant plus ca-certificates (for https object stores): about
# 100 MB, 3-6 minutes depending on the mirror.
set -euo pipefail

TAG=${1:-localhost/paraforge-base:bookworm}
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-}
CONTAINER=${CONTAINER:-podman}

if [ "$(id -u)" != 0 ]; then
    echo "debian-base.sh: debootstrap needs root" >&2
    exit 1
fi
command -v debootstrap >/dev/null || { echo "debian-base.sh: debootstrap is not installed" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/var/tmp}/paraforge-base.XXXXXX")
# debootstrap mounts proc and sys in the tree while it runs; a failed run
# may leave them mounted, so unmount before removing and never cross into them.
cleanup() {
    for m in proc sys dev/pts; do umount -l "$work/rootfs/$m" 2>/dev/null || true; done
    rm -rf --one-file-system "$work"
}
trap cleanup EXIT
root=$work/rootfs

echo "debian-base.sh: debootstrap $SUITE into $root"
# shellcheck disable=SC2086  # MIRROR is empty or one URL
debootstrap --variant=minbase --include=ca-certificates "$SUITE" "$root" $MIRROR >"$work/debootstrap.log" 2>&1 || {
    tail -n 30 "$work/debootstrap.log" >&2
    echo "debian-base.sh: debootstrap failed" >&2
    exit 1
}

# What a container image does not need: package caches and lists, logs.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
       "$root"/var/log/* "$root"/tmp/* "$root"/root/.cache
: >"$root/etc/hostname"

echo "debian-base.sh: importing as $TAG"
tar -C "$root" --numeric-owner -c . |
    $CONTAINER import --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' - "$TAG" >/dev/null
$CONTAINER image inspect --format '{{.Id}}' "$TAG" >/dev/null
echo "debian-base.sh: built $TAG"
