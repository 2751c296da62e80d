# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module: remove a vendor's keys from APT's apt-key era keyrings."""

from __future__ import annotations

DOCUMENTATION = r"""
module: apt_legacy_keys
short_description: Remove a vendor's keys from APT's legacy (apt-key) keyrings
description:
  - C(apt-key) is deprecated. A key it added lives in C(/etc/apt/trusted.gpg) or as a file in
    C(/etc/apt/trusted.gpg.d), and APT then trusts it for B(every) repository. Once the key is
    kept in C(/etc/apt/keyrings) and referenced with C(Signed-By), those copies must go.
  - Reads every keyring in O(paths) (binary C(.gpg) or armored C(.asc); directories are
    scanned for C(*.gpg) and C(*.asc)), finds the keys whose fingerprint is one of O(key)'s,
    deletes a file that holds nothing else and rewrites a keyring that also holds other keys
    without them. Files named in O(names) are deleted whatever they hold.
  - Fingerprints are computed in Python (no gpg needed on the host). Check mode reports
    what would change.
options:
  key:
    description: The vendor key, ASCII-armored (as served at the repository's key URL).
    type: str
    required: true
  paths:
    description: Keyring files and directories of keyrings to clean.
    type: list
    elements: path
    default: [/etc/apt/trusted.gpg, /etc/apt/trusted.gpg.d]
  names:
    description:
      - File names (no directory) deleted from the O(paths) directories whatever they hold.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - instinct.vllm.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
author:
  - instinct.vllm maintainers (@instinct-vllm)
"""

EXAMPLES = r"""
- name: Remove the ROCm key from the apt-key keyrings
  instinct.vllm.apt_legacy_keys:
    key: "{{ _rocm_key.content }}"
    names: [rocm.gpg, amdgpu.gpg]
"""

RETURN = r"""
fingerprints:
  description: Primary fingerprints of O(key).
  type: list
  elements: str
  returned: always
removed:
  description: Files deleted.
  type: list
  elements: str
  returned: always
rewritten:
  description: Keyrings rewritten without the vendor keys (they held other keys too).
  type: list
  elements: str
  returned: always
unreadable:
  description: Files that could not be parsed as keyrings (left alone, with a warning).
  type: list
  elements: str
  returned: always
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.instinct.vllm.plugins.module_utils.openpgp_keyring import (  # noqa: E402
    KeyringError,
    armor,
    is_armored,
    key_fingerprints,
    prune,
)


def _candidates(paths: list[str]) -> list[str]:
    files: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            files += sorted(
                os.path.join(path, name)
                for name in os.listdir(path)
                if name.endswith((".gpg", ".asc")) and os.path.isfile(os.path.join(path, name))
            )
        elif os.path.isfile(path):
            files.append(path)
    return files


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "key": {"type": "str", "required": True, "no_log": False},
            "paths": {
                "type": "list",
                "elements": "path",
                "default": ["/etc/apt/trusted.gpg", "/etc/apt/trusted.gpg.d"],
            },
            "names": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    try:
        wanted = set(key_fingerprints(module.params["key"].encode()))
    except KeyringError as exc:
        module.fail_json(msg=f"key: not an OpenPGP public key: {exc}")
    if not wanted:
        module.fail_json(msg="key: holds no public key")
    removed: list[str] = []
    rewritten: list[str] = []
    unreadable: list[str] = []
    for path in _candidates(module.params["paths"]):
        if os.path.basename(path) in module.params["names"]:
            removed.append(path)
            if not module.check_mode:
                os.unlink(path)
            continue
        with open(path, "rb") as handle:
            data = handle.read()
        try:
            result = prune(data, wanted)
        except KeyringError as exc:
            unreadable.append(path)
            module.warn(f"{path}: not a keyring this module can read ({exc}); left alone")
            continue
        if not result.removed:
            continue
        if not result.kept:
            removed.append(path)
            if not module.check_mode:
                os.unlink(path)
            continue
        rewritten.append(path)
        if not module.check_mode:
            content = armor(result.data).encode() if is_armored(data) else result.data
            tmp = f"{path}.instinct-tmp"
            with open(tmp, "wb") as handle:
                handle.write(content)
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
            module.atomic_move(tmp, path)
    module.exit_json(
        changed=bool(removed or rewritten),
        fingerprints=sorted(wanted),
        removed=removed,
        rewritten=rewritten,
        unreadable=unreadable,
    )


if __name__ == "__main__":
    main()
