# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Classify fetched diagnose archives and bundle them into one (thin module; run on the
controller; the logic is in module_utils/diagnose.py and module_utils/_diagnose/)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: diagnose_classify
short_description: Name each node's failure class and bundle the evidence into one archive
version_added: "0.2.0"
description:
  - Reads the per-node archives M(instinct.vllm.diagnose_collect) wrote (fetched to the
    controller), names the known failure class of each node with its fix - a failed vLLM
    source build (the class and fix M(instinct.vllm.vllm_build) gives for the same log -
    patch failure, OOM-killed or crashed compiler, missing C++ headers or dependency),
    import-time Triton / torch mismatch, run-time illegal instruction or hipErrorNoBinaryForGpu
    from a wrong PYTORCH_ROCM_ARCH, "Failed to infer device type"
    (amdsmi binding missing), transformers too new, amdgpu not loaded or blacklisted, service
    user not in render / video, out of memory, DKMS build failure, Secure Boot refusing the
    module, outputs that drift from the fleet baseline or from the unchanged nodes (the node's
    last fingerprint, I(fingerprints_dir)) - or C(unknown) when none matched.
  - Checks every file again for the I(secrets) and writes nothing when one is found.
  - Writes one archive with C(SUMMARY.md), C(verdicts.json) and each node's files and verdict.
  - "Run it on the controller (C(delegate_to: localhost))."
options:
  archives:
    description: The node archives, C(<host>.tar.gz) each (the file name names the host).
    type: list
    elements: path
    required: true
  dest:
    description: Path of the combined archive.
    type: path
    required: true
  secrets:
    description: Values that must not appear in any file.
    type: list
    elements: str
    default: []
  remove_sources:
    description: Delete the node archives once bundled.
    type: bool
    default: true
  fingerprints_dir:
    description: The controller's fingerprint directory (role fingerprint_gate's
      C(instinct_vllm_fingerprint_baseline_dir)); each node's last fingerprint,
      C(nodes/<host>.json), joins its evidence - class C(outputs_drift) names what changed
      when a verdict failed. Empty or missing - none.
    type: path
extends_documentation_fragment:
  - instinct.vllm.attributes
attributes:
  check_mode:
    support: none
  diff_mode:
    support: none
author:
  - instinct.vllm maintainers (@instinct-vllm)
"""

EXAMPLES = r"""
- name: Classify and bundle
  instinct.vllm.diagnose_classify:
    archives: "{{ query('ansible.builtin.fileglob', run_dir ~ '/nodes/*.tar.gz') }}"
    dest: "{{ run_dir }}/diagnose.tar.gz"
    secrets: ["{{ vllm_service_api_key }}"]
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
archive:
  description: The combined archive.
  type: str
  returned: success
verdicts:
  description: Per host - primary (the first class found, or unknown), classes, findings
    (cls, title, fix, evidence), summary, service, skipped.
  type: dict
  returned: success
summary:
  description: SUMMARY.md as text.
  type: str
  returned: success
"""

from pathlib import Path  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.instinct.vllm.plugins.module_utils.diagnose import (  # noqa: E402
    LeakError,
    Redactor,
    bundle,
    fingerprint_records,
    hosts_in,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "archives": {"type": "list", "elements": "path", "required": True},
            "dest": {"type": "path", "required": True},
            "secrets": {"type": "list", "elements": "str", "default": [], "no_log": True},
            "remove_sources": {"type": "bool", "default": True},
            "fingerprints_dir": {"type": "path"},
        },
        supports_check_mode=False,
    )
    p = module.params
    if not p["archives"]:
        module.fail_json(msg="archives: no node archive to classify (did the collection fail?)")
    try:
        hosts = hosts_in(p["archives"])
        result = bundle(hosts, p["dest"], Redactor(p["secrets"]),
                        fingerprints=fingerprint_records(p["fingerprints_dir"], hosts))
    except LeakError as exc:
        module.fail_json(msg=str(exc))
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"cannot read a node archive: {exc}")
    if p["remove_sources"]:
        for path in p["archives"]:
            Path(path).unlink(missing_ok=True)
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()
