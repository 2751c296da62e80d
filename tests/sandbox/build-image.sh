#!/usr/bin/env bash
# Build the sandbox host image (Debian bookworm, systemd as PID 1) with debootstrap, once:
# the image is tagged with a hash of this recipe and rebuilt only when the recipe changes.
# localhost/instinct-sandbox:latest always points at the current recipe's image.
set -euo pipefail

name=${INSTINCT_SANDBOX_IMAGE_NAME:-localhost/instinct-sandbox}
suite=${INSTINCT_SANDBOX_SUITE:-bookworm}
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
