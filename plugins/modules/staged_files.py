#!/usr/bin/python
# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module: put staged files in place, each atomically, in one step."""

from __future__ import annotations

DOCUMENTATION = r"""
module: staged_files
short_description: Put files staged earlier in place, each atomically, in one task
description:
  - Copies each O(files[].src) over its O(files[].dest) with the given mode, owner and group,
    through a temporary file in the destination's directory renamed over it, so a reader (systemd,
    the service) sees the old file or the new one, never a part. A link at a destination is
    replaced, not followed.
  - A destination that already has the staged bytes, mode, owner and group is left alone;
    C(changed) is true when any file was put in place.
  - Role vllm_service writes the wrapper, the environment file and the unit into a staging
    directory while the old release serves (entry point stage), and puts them in place with this
    module once the gateway has drained the node (entry point switch) - one module run instead of
    one per file while the node is out of rotation.
  - Shows no diff (the environment file holds the API key). Supports check mode.
options:
  files:
    description: The files to put in place, in order.
    type: list
    elements: dict
    required: true
    suboptions:
      src:
        description: The staged file on the host.
        type: path
        required: true
      dest:
        description: Where it goes; its directory must exist.
        type: path
        required: true
      mode:
        description: Octal mode of the file in place, for example C('0644').
        type: str
        required: true
      owner:
        description: Owner of this file in place; default O(owner).
        type: str
      group:
        description: Group of this file in place; default O(group).
        type: str
  owner:
    description: Owner of every file put in place that names none (O(files[].owner)).
    type: str
    default: root
  group:
    description: Group of every file put in place that names none (O(files[].group)).
    type: str
    default: root
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
- name: Put the staged unit and its environment file in place
  instinct.vllm.staged_files:
    files:
      - {src: /etc/vllm/staged/vllm.env, dest: /etc/vllm/vllm.env, mode: "0600"}
      - {src: /etc/vllm/staged/vllm.service, dest: /etc/systemd/system/vllm.service, mode: "0644"}
      - {src: /etc/vllm/staged/tls-node.key, dest: /etc/vllm-tls/node.key, mode: "0600",
         owner: vllm, group: vllm}
  notify: Restart vLLM
"""

RETURN = r"""
placed:
  description: The destinations that were (in check mode, would be) put in place.
  type: list
  elements: str
  returned: always
"""

import grp  # noqa: E402
import pwd  # noqa: E402
from pathlib import Path  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.instinct.vllm.plugins.module_utils._fileutil import (  # noqa: E402
    place_file,
    same_file,
)


def octal_mode(text: str) -> int:
    """'0644' -> 0o644; a ValueError names what is wrong."""
    try:
        mode = int(text, 8)
    except ValueError:
        raise ValueError(f"mode {text!r} is not an octal number such as '0644'") from None
    if not 0 <= mode <= 0o7777:
        raise ValueError(f"mode {text!r} is not between 0000 and 7777")
    return mode


def ids(owner: str, group: str) -> tuple[int, int]:
    """The uid and gid of the names; a KeyError when one does not exist."""
    return pwd.getpwnam(owner).pw_uid, grp.getgrnam(group).gr_gid


Placement = tuple[Path, Path, int, int, int]


def placements(params: dict) -> list[Placement]:
    """(src, dest, mode, uid, gid) of each file; a KeyError or ValueError names what is wrong."""
    return [(Path(f["src"]), Path(f["dest"]), octal_mode(f["mode"]),
             *ids(f["owner"] or params["owner"], f["group"] or params["group"]))
            for f in params["files"]]


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "list", "elements": "dict", "required": True, "options": {
                "src": {"type": "path", "required": True},
                "dest": {"type": "path", "required": True},
                "mode": {"type": "str", "required": True},
                "owner": {"type": "str"},
                "group": {"type": "str"},
            }},
            "owner": {"type": "str", "default": "root"},
            "group": {"type": "str", "default": "root"},
        },
        supports_check_mode=True,
    )
    try:
        files = placements(module.params)
    except (KeyError, ValueError) as exc:
        module.fail_json(msg=f"staged_files: {exc}")
    missing = [str(f[0]) for f in files if not f[0].is_file()]
    if missing:
        module.fail_json(msg=f"nothing staged at {', '.join(missing)}: stage the release first")
    placed = [f[1] for f in files if not same_file(*f)]
    if not module.check_mode:
        for src, dest, mode, uid, gid in files:
            if dest in placed:
                try:
                    place_file(src, dest, mode, uid, gid)
                except OSError as exc:
                    module.fail_json(msg=f"could not put {src} in place at {dest}: {exc}",
                                     placed=[str(p) for p in placed[:placed.index(dest)]])
    module.exit_json(changed=bool(placed), placed=[str(p) for p in placed])


if __name__ == "__main__":
    main()
