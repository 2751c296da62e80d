#!/usr/bin/env bash
# Build a sandbox host image (Debian, systemd as PID 1) with debootstrap, once: the image is
# tagged with a hash of this recipe and its suite, and rebuilt only when they change.
#   build-image.sh [SUITE]   SUITE: bookworm (default) or trixie
# localhost/instinct-sandbox:latest always points at the current bookworm image (what the
# Molecule scenarios boot); another suite's image is localhost/instinct-sandbox-SUITE.
set -euo pipefail

suite=${1:-${INSTINCT_SANDBOX_SUITE:-bookworm}}
case $suite in
  bookworm) default_name=localhost/instinct-sandbox ;;
  trixie) default_name=localhost/instinct-sandbox-$suite ;;
  *) echo "build-image.sh: suite '$suite' is not bookworm or trixie" >&2; exit 2 ;;
esac
name=${INSTINCT_SANDBOX_IMAGE_NAME:-$default_name}
mirror=${INSTINCT_SANDBOX_MIRROR:-http://deb.debian.org/debian}
# Packages in the image: what every role's tests need on a bare host. Changing this list
# (or anything else in this file) changes the tag, and so rebuilds the image.
packages=systemd,systemd-sysv,dbus,python3,python3-apt,python3-debian,python3-venv,python3-pip,sudo,apt,ca-certificates,gnupg,iproute2,procps,kmod,curl,patch,less
recipe_hash=$( { cat "$0"; echo "$suite $mirror $packages"; } | sha256sum | cut -c1-12)
tag="$name:$recipe_hash"

if podman image exists "$tag"; then
  podman tag "$tag" "$name:latest"
  echo "sandbox image $tag is current (recipe unchanged)"
  exit 0
fi

work=$(mktemp -d /var/tmp/instinct-sandbox.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "building sandbox image $tag from $suite (debootstrap, ~1 minute)"
debootstrap --variant=minbase --include="$packages" "$suite" "$work/rootfs" "$mirror" \
  >"$work/debootstrap.log" 2>&1 || { tail -n 40 "$work/debootstrap.log"; exit 1; }
chroot "$work/rootfs" apt-get clean
rm -rf "$work"/rootfs/var/lib/apt/lists/* "$work"/rootfs/var/cache/apt/*.bin
# The lists are gone, so mark them as never updated: apt's cache_valid_time reads this
# directory's mtime, and an image younger than the validity would otherwise skip the update
# and find no package at all (seen on a new machine: "No package matching 'libnuma1'").
touch -d @0 "$work/rootfs/var/lib/apt/lists"
: >"$work/rootfs/etc/machine-id"
# No getty on a container console; no udev trigger noise.
chroot "$work/rootfs" systemctl mask getty@tty1.service serial-getty@ttyS0.service \
  console-getty.service systemd-udevd.service systemd-udev-trigger.service >/dev/null 2>&1 || true
tar -C "$work/rootfs" --numeric-owner -c . |
  podman import --change 'CMD ["/sbin/init"]' --change 'STOPSIGNAL SIGRTMIN+3' - "$tag" >/dev/null
podman tag "$tag" "$name:latest"
echo "built $tag"
