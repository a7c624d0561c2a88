#!/usr/bin/env bash
# offline-base-image.sh builds a sandpit base image without a container registry.
#
# It debootstraps a minimal Debian bookworm root filesystem with python3 and the
# default preinstalled packages taken from Debian's own archive (pandas, numpy,
# matplotlib, scipy, requests, beautifulsoup4, Pillow, IPython), then loads it into
# the Docker engine with `docker import`. Build the sandbox on top of it with:
#
#   sandpit image build --base-image sandpit-base:bookworm-2
#
# The tag's suffix names the package list: it goes up whenever the list changes, so that a
# machine holding an image of an older list builds the new one instead of reusing it
# (sandpit-base:bookworm had no IPython; -2 added python3-ipython for notebook results).
#
# Usage: scripts/offline-base-image.sh [TAG]
#   TAG            image tag to create (default sandpit-base:bookworm-2)
# Environment:
#   DEBIAN_MIRROR  Debian mirror (default http://deb.debian.org/debian)
#   SUITE          Debian suite (default bookworm)
#   FORCE=1        rebuild even when TAG already exists
# Needs root, debootstrap (installed with apt-get when missing) and docker.
set -euo pipefail

tag=${1:-sandpit-base:bookworm-2}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=${SUITE:-bookworm}

log() { printf '[offline-base-image] %s\n' "$*" >&2; }

if [ "${FORCE:-0}" != 1 ] && docker image inspect "$tag" >/dev/null 2>&1; then
  log "image $tag already exists (FORCE=1 rebuilds it)"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  log "must run as root (debootstrap needs it); try: sudo $0 $*"
  exit 1
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  log "installing debootstrap"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

packages=(
  python3 python3-pip python3-venv ca-certificates tzdata
  python3-pandas python3-numpy python3-matplotlib python3-scipy
  python3-requests python3-bs4 python3-pil python3-ipython
)
include=$(IFS=,; echo "${packages[*]}")

root=$(mktemp -d /tmp/sandpit-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT

log "debootstrap $suite from $mirror into $root (a few minutes)"
debootstrap --variant=minbase --include="$include" "$suite" "$root" "$mirror" |
  while IFS= read -r line; do
    case "$line" in I:\ Retrieving*|I:\ Validating*) ;; *) log "$line" ;; esac
  done

log "trimming apt lists, docs and caches"
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* "$root"/usr/share/man/* \
  "$root"/usr/share/locale/* "$root"/var/cache/debconf/*-old

log "importing into docker as $tag"
tar --numeric-owner -C "$root" -c . |
  docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    --message "sandpit offline base: debian $suite with python3 and the default packages" \
    - "$tag" >/dev/null
log "done: $(docker image inspect -f '{{.Id}} {{.Size}}' "$tag") bytes"
