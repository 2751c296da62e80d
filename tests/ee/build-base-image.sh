#!/usr/bin/env bash
# Build the execution-environment base image (Debian bookworm) with debootstrap, once: no
# container registry is reachable here, so ansible-builder's EE is built FROM this image
# (docs/awx.md). Tagged with a hash of this recipe, rebuilt only when the recipe changes;
# localhost/instinct-ee-base:latest points at the current recipe's image.
#
# What ansible-builder 3 requires of a base image (read from its _target_scripts):
#   python3 at /usr/bin/python3 (PYCMD), with the venv module (assemble makes /tmp/venv);
#   pip (the definition sets skip_pip_install: Debian's python3 has no ensurepip, python3-pip
#   is installed instead);
#   bash (assemble, install-from-bindep, check_* are bash scripts);
#   a package manager taking `install -y PKGS` and `clean all` (dnf's interface): the shim
#   /usr/local/bin/instinct-ee-pkgmgr below maps both onto apt-get (options.package_manager_path);
#   git for ansible-galaxy's git requirements (collections/requirements.yml, the AWX path).
# Nothing the collection itself needs is here: that is bindep.txt / requirements.txt, which
# ansible-builder installs on top (openssh-client comes from bindep.txt).
set -euo pipefail

name=${INSTINCT_EE_BASE_IMAGE_NAME:-localhost/instinct-ee-base}
suite=${INSTINCT_SANDBOX_SUITE:-bookworm}
mirror=${INSTINCT_SANDBOX_MIRROR:-http://deb.debian.org/debian}
packages=python3,python3-pip,python3-venv,ca-certificates,git
recipe_hash=$( { cat "$0"; echo "$suite $mirror $packages"; } | sha256sum | cut -c1-12)
tag="$name:$recipe_hash"

if podman image exists "$tag"; then
  podman tag "$tag" "$name:latest"
  echo "EE base image $tag is current (recipe unchanged)"
  exit 0
fi

work=$(mktemp -d /var/tmp/instinct-ee-base.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "building EE base image $tag from $suite (debootstrap, ~1 minute)"
debootstrap --variant=minbase --include="$packages" "$suite" "$work/rootfs" "$mirror" \
  >"$work/debootstrap.log" 2>&1 || { tail -n 40 "$work/debootstrap.log"; exit 1; }
cat >"$work/rootfs/usr/local/bin/instinct-ee-pkgmgr" <<'SHIM'
#!/bin/sh
# dnf's interface, as ansible-builder calls it (`install -y [opts] PKGS`, `clean all`), on apt-get.
# Packages already installed are not fetched again, so a base image that carries them builds
# without Debian's archive (air-gapped sites).
set -eu
cmd=$1; shift
case $cmd in
  install)
    missing=
    for arg in "$@"; do
      case $arg in -*) continue ;; esac
      dpkg-query -W -f='${Status}' "$arg" 2>/dev/null | grep -q 'ok installed' || missing="$missing $arg"
    done
    [ -n "$missing" ] || exit 0
    apt-get update -qq
    # shellcheck disable=SC2086  # one package per word
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
    rm -rf /var/lib/apt/lists/*
    ;;
  clean) apt-get clean ;;
  *) echo "instinct-ee-pkgmgr: unsupported command $cmd" >&2; exit 2 ;;
esac
SHIM
chmod 0755 "$work/rootfs/usr/local/bin/instinct-ee-pkgmgr"
chroot "$work/rootfs" apt-get clean
rm -rf "$work"/rootfs/var/lib/apt/lists/* "$work"/rootfs/var/cache/apt/*.bin
: >"$work/rootfs/etc/machine-id"
tar -C "$work/rootfs" --numeric-owner -c . |
  podman import --change 'CMD ["/bin/bash"]' - "$tag" >/dev/null
podman tag "$tag" "$name:latest"
echo "built $tag"
