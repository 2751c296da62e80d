#!/usr/bin/python
# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module: flatten a vLLM source's requirements files without the stack-owned packages (thin)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_source_requirements
short_description: Write a vLLM source's requirements, flattened, without stack-pinned packages
description:
  - Reads requirements files of an unpacked vLLM source (following C(-r)), drops comments, pip
    options and the packages in O(drop) (torch comes from the stack's own index, as vLLM's
    C(use_existing_torch.py) does, but without editing the source tree), and writes the rest
    to O(dest), one requirement a line.
options:
  root: {description: The source tree., type: path, required: true}
  files:
    description: Requirements files relative to O(root).
    type: list
    elements: str
    required: true
  drop:
    description: Package names left out.
    type: list
    elements: str
    default: [torch]
  dest: {description: File written., type: path, required: true}
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
- name: Build requirements without torch
  instinct.vllm.vllm_source_requirements:
    root: /var/lib/instinct-vllm/source/abc/vllm-0.6.6.post1
    files: [requirements-build.txt]
    dest: /var/lib/instinct-vllm/source/abc/build-requirements.txt
"""

RETURN = r"""
requirements: {description: The requirements written., type: list, elements: str, returned: success}
"""

from pathlib import Path  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.instinct.vllm.plugins.module_utils.vllm_build import (  # noqa: E402
    BuildInputError,
    requirements_from,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "files": {"type": "list", "elements": "str", "required": True},
            "drop": {"type": "list", "elements": "str", "default": ["torch"]},
            "dest": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        reqs = requirements_from(p["root"], p["files"], tuple(d.lower() for d in p["drop"]))
    except BuildInputError as exc:
        module.fail_json(msg=str(exc))
    content = "".join(f"{r}\n" for r in reqs)
    dest = Path(p["dest"])
    old = dest.read_text(encoding="utf-8") if dest.is_file() else None
    changed = old != content
    if changed and not module.check_mode:
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(content, encoding="utf-8")
    module.exit_json(changed=changed, requirements=reqs)


if __name__ == "__main__":
    main()
