#!/usr/bin/env bash
# Makes the images' base where no image registry is reachable (FROM python:3.11-slim cannot be pulled):
# Debian bookworm with its Python 3.11 (python3, venv, `python` on the PATH), by debootstrap from the
# Debian mirror apt uses, imported into podman's image store as $1. Done once: an existing image is kept.
# Needs root, debootstrap and podman (make images-tools installs them).
set -euo pipefail
image=${1:?usage: debian-base.sh IMAGE [MIRROR]}
mirror=${2:-http://deb.debian.org/debian}
if podman image exists "$image"; then
    echo "$image: already in podman's image store"
    exit 0
fi
root=$(mktemp -d /var/tmp/acidclean-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
    bookworm "$root" "$mirror" >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }
rm -f "$root.log"
# The security and updates suites as in Debian's own images, so apt-get in the builds gets fixes too.
cat >"$root/etc/apt/sources.list" <<SOURCES
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb ${mirror%/debian}/debian-security bookworm-security main
SOURCES
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
tar --numeric-owner -C "$root" -c . | podman import --change 'CMD ["python3"]' - "$image" >/dev/null
echo "$image: made by debootstrap from $mirror"
