#!/usr/bin/python
# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module: apply a patch series to a source tree, checking each patch first (thin)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_patch
short_description: Apply a patch series in order, each checked first, an applied series left alone
description:
  - For each patch in order runs C(patch --dry-run --forward -p1); if it applies, applies it.
    Otherwise checks the reverse (C(--dry-run --reverse)); if that applies the patch is
    already applied and left alone. Otherwise fails naming the patch, with patch's output,
    before any later patch is touched.
  - Needs GNU C(patch) on the host.
options:
  tree:
    description: The source tree (patches are C(-p1) relative to it).
    type: path
    required: true
  patches:
    description: Patch files on the host, in the order to apply.
    type: list
    elements: path
    required: true
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
- name: Apply the series
  instinct.vllm.vllm_patch:
    tree: /var/lib/instinct-vllm/source/abc/vllm-0.6.6.post1
    patches: [/var/lib/instinct-vllm/source/abc/patches/0001-x.patch]
"""

RETURN = r"""
results:
  description: >-
    Per patch, C({patch, status}); status is applied, already_applied, would_apply or pending.
  type: list
  elements: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.instinct.vllm.plugins.module_utils.vllm_build import (  # noqa: E402
    PatchError,
    apply_series,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "tree": {"type": "path", "required": True},
            "patches": {"type": "list", "elements": "path", "required": True},
        },
        supports_check_mode=True,
    )
    patch_cmd = module.get_bin_path("patch", required=True)
    try:
        result = apply_series(
            module.params["tree"], module.params["patches"], module.check_mode, patch_cmd=patch_cmd
        )
    except PatchError as exc:
        module.fail_json(
            msg=str(exc), failed_patch=exc.name, results=exc.results, category="patch_failure"
        )
    module.exit_json(changed=result.changed, results=result.results)


if __name__ == "__main__":
    main()
