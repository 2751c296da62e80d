#!/usr/bin/python
# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module: the build key, MAX_JOBS and environment of a vLLM source build (thin)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_build_env
short_description: Compute the build key, MAX_JOBS and build environment of a vLLM source build
description:
  - Reads the host's usable cores (CPU affinity) and C(MemAvailable) from C(/proc/meminfo),
    sets C(MAX_JOBS) to min(cores, available GiB / O(gib_per_job)) unless O(max_jobs) is given,
    resolves the GPU archs (O(arch_override), else O(facts_archs) from gpu_facts, else
    O(stack_archs)) and returns the exact environment C(setup.py bdist_wheel) runs with.
  - Returns the build key (hash of vLLM source, patch contents, torch, ROCm, archs and build
    knobs) and whether the stamp file at O(stamp_path) already records it.
  - Changes nothing; check mode runs the same.
options:
  source:
    description: The stack's C(vllm.source) block (url, sha256, subdir, target_device, ...).
    type: dict
    required: true
  vllm_version: {description: The stack's vLLM version., type: str, required: true}
  torch_version: {description: The stack's torch version., type: str, required: true}
  torch_index:
    description: The stack's torch index URL (part of the key).
    type: str
  rocm_version:
    description: The stack's ROCm version (part of the key for ROCm targets).
    type: str
  rocm_path:
    description: ROCm prefix exported as ROCM_PATH and HIP_PATH (ROCm targets).
    type: str
  stack_archs:
    description: The stack's gpu_archs.
    type: list
    elements: str
    default: []
  facts_archs:
    description: The archs gpu_facts found on the host.
    type: list
    elements: str
    default: []
  arch_override:
    description: PYTORCH_ROCM_ARCH given by the user (C(;) or C(,) separated); wins over the facts.
    type: str
    default: ""
  max_jobs:
    description: MAX_JOBS given by the user; 0 computes it.
    type: int
    default: 0
  gib_per_job:
    description: GiB of memory one compile job may need.
    type: float
    default: 8
  venv:
    description: The virtualenv the build runs in.
    type: str
    required: true
  extra_env:
    description: Extra build environment (build knobs, part of the key).
    type: dict
    default: {}
  patches:
    description: The series in order, each C({name, sha256}).
    type: list
    elements: dict
    default: []
  stamp_path:
    description: The stamp file a finished install writes.
    type: str
    required: true
  meminfo_path:
    description: Where to read the memory figures.
    type: str
    default: /proc/meminfo
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
- name: Compute the build environment and key
  instinct.vllm.vllm_build_env:
    source: "{{ stack.vllm.source }}"
    vllm_version: "{{ stack.vllm.version }}"
    torch_version: "{{ stack.torch.version }}"
    venv: /opt/vllm/venv
    stamp_path: /opt/vllm/venv/instinct-vllm-source.json
  register: build
"""

RETURN = r"""
key: {description: The build key (16 hex digits)., type: str, returned: success}
key_inputs: {description: What the key hashes., type: dict, returned: success}
env: {description: The build environment., type: dict, returned: success}
archs: {description: The GPU archs built for., type: list, elements: str, returned: success}
archs_origin: {description: Where the archs came from., type: str, returned: success}
max_jobs: {description: MAX_JOBS., type: int, returned: success}
max_jobs_reason: {description: How MAX_JOBS was chosen., type: str, returned: success}
cores: {description: Usable cores., type: int, returned: success}
mem_available_gib: {description: MemAvailable in GiB., type: float, returned: success}
stamp: {description: "The stamp file's content, or null.", type: dict, returned: success}
stamp_matches: {description: The stamp records this key., type: bool, returned: success}
"""

import os  # noqa: E402
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.instinct.vllm.plugins.module_utils.vllm_build import (  # noqa: E402
    GIB,
    BuildInputError,
    build_env,
    build_key,
    check_source,
    key_inputs,
    max_jobs,
    parse_meminfo,
    read_stamp,
    resolve_archs,
)

ARGUMENT_SPEC = {
    "source": {"type": "dict", "required": True},
    "vllm_version": {"type": "str", "required": True},
    "torch_version": {"type": "str", "required": True},
    "torch_index": {"type": "str"},
    "rocm_version": {"type": "str"},
    "rocm_path": {"type": "str"},
    "stack_archs": {"type": "list", "elements": "str", "default": []},
    "facts_archs": {"type": "list", "elements": "str", "default": []},
    "arch_override": {"type": "str", "default": ""},
    "max_jobs": {"type": "int", "default": 0},
    "gib_per_job": {"type": "float", "default": 8},
    "venv": {"type": "str", "required": True},
    "extra_env": {"type": "dict", "default": {}},
    "patches": {"type": "list", "elements": "dict", "default": []},
    "stamp_path": {"type": "str", "required": True},
    "meminfo_path": {"type": "str", "default": "/proc/meminfo"},
}


def build_plan(p: dict[str, Any]) -> dict[str, Any]:
    """Archs, MAX_JOBS, environment and key inputs from the module's parameters."""
    source = check_source(p["source"])
    archs, origin = resolve_archs(
        p["arch_override"], p["facts_archs"], p["stack_archs"], source["target_device"]
    )
    with open(p["meminfo_path"], encoding="utf-8") as handle:
        mem = parse_meminfo(handle.read())
    cores = len(os.sched_getaffinity(0))
    jobs, reason = max_jobs(cores, mem, p["gib_per_job"], p["max_jobs"])
    extra = {str(k): str(v) for k, v in p["extra_env"].items()}
    env = build_env(source["target_device"], archs, jobs, p["venv"], p["rocm_path"], extra)
    inputs = key_inputs(
        p["vllm_version"],
        source,
        p["patches"],
        p["torch_version"],
        p["torch_index"],
        p["rocm_version"],
        archs,
        extra,
    )
    return {
        "key_inputs": inputs,
        "env": env,
        "archs": archs,
        "archs_origin": origin,
        "max_jobs": jobs,
        "max_jobs_reason": reason,
        "cores": cores,
        "mem_available_gib": round(mem / GIB, 1),
    }


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        plan = build_plan(module.params)
    except (BuildInputError, OSError) as exc:
        module.fail_json(msg=str(exc))
    key = build_key(plan["key_inputs"])
    stamp = read_stamp(module.params["stamp_path"])
    module.exit_json(
        changed=False,
        key=key,
        **plan,
        stamp=stamp,
        stamp_matches=bool(stamp and stamp.get("key") == key),
    )


if __name__ == "__main__":
    main()
