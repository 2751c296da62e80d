# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Gather AMD Instinct GPU facts (thin module; the logic is in module_utils/_gpu_facts/)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Gather AMD Instinct GPU, ROCm and amdgpu driver facts
version_added: "0.1.0"
description:
  - Finds AMD Instinct GPUs with C(lspci -D -nn -k -d 1002:) (works before ROCm is installed),
    then, when the tools exist, the HSA agents from C(rocminfo) (gfx name, marketing name,
    compute units, VRAM), C(amd-smi static --json) and C(amd-smi version --json), or the
    concise C(rocm-smi) table when amd-smi is absent or failed.
  - With rocm-smi, the compute and memory partition mode of every device it lists
    (C(rocm-smi --showcomputepartition --showmemorypartition)).
  - Reads the amdgpu driver state from C(/sys/module/amdgpu) (version file, initstate),
    C(lsmod) and C(dkms status -m amdgpu), lists files in C(/etc/modprobe.d) that
    blacklist amdgpu, and reads the Secure Boot state (EFI variable, else
    C(mokutil --sb-state)) and, with Secure Boot on, whether the DKMS signing key
    C(/var/lib/shim-signed/mok/MOK.der) is enrolled (C(mokutil --test-key)).
  - Runs a command only when the tool is present, never changes anything, and reports tool
    failures (driver not loaded, permission denied, C(/dev/kfd) invalid argument) as facts
    and in C(problems) instead of failing.
options:
  sources:
    description: Which sources to read.
    type: list
    elements: str
    choices: [pci, rocminfo, amd_smi, rocm_smi, driver]
    default: [pci, rocminfo, amd_smi, rocm_smi, driver]
  search_paths:
    description: Extra directories searched for the tools, before C(PATH).
    type: list
    elements: path
    default: [/opt/rocm/bin]
  rocm_path:
    description:
      - The ROCm prefix; C(<rocm_path>/.info/version) gives the ROCm version when amd-smi does not.
    type: path
    default: /opt/rocm
  sys_module_dir:
    description: Where the kernel lists loaded modules.
    type: path
    default: /sys/module
  modprobe_dir:
    description: Directory of modprobe configuration files checked for an amdgpu blacklist.
    type: path
    default: /etc/modprobe.d
  efivars_dir:
    description: Where the EFI variables are (the SecureBoot variable is read from here).
    type: path
    default: /sys/firmware/efi/efivars
  fail_on_problems:
    description: Fail when a problem was found (for example the driver is not loaded).
    type: bool
    default: false
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
- name: Gather GPU facts
  instinct.vllm.gpu_facts:
  register: gpu

- name: Show what was found
  ansible.builtin.debug:
    msg: "{{ gpu.gpu_facts.count }} x {{ gpu.gpu_facts.archs | join(', ') }}"

- name: PCI only (before ROCm is installed)
  instinct.vllm.gpu_facts:
    sources: [pci, driver]
"""

RETURN = r"""
gpu_facts:
  description: All facts (also set as the fact C(instinct_vllm_gpu_facts)).
  returned: always
  type: dict
  contains:
    count:
      description: >-
        GPUs found (PCI devices; the rocminfo agents or amd-smi entries when PCI shows none).
      type: int
      sample: 8
    archs:
      description: Sorted distinct LLVM targets.
      type: list
      elements: str
      sample: [gfx942]
    products:
      description: Sorted distinct product names.
      type: list
      elements: str
      sample: [MI300X]
    gpus:
      description: >-
        One entry per GPU with bdf, product, device_id, arch, family, vf, marketing_name,
        compute_units, vram_gib, uuid, node, driver_in_use, partitions (agents on that address)
        and sources.
      type: list
      elements: dict
    pci:
      description: C({tool, status, count, error}); status ok, not_installed, error or skipped.
      type: dict
    rocminfo:
      description: >-
        C({tool, status, error, rock_loaded, rock_version, gpu_agent_count, cpu_agent_count});
        status ok, no_gpus, rock_not_loaded, kfd_error, hsa_error, unparsable, not_installed
        or skipped.
      type: dict
    amd_smi:
      description: C({tool, status, error, gpu_count, rocm_version, amdgpu_version, version}).
      type: dict
    rocm_smi:
      description: C({tool, status, error, gpu_count, ids}) (read only when amd-smi gave nothing).
      type: dict
    partition_modes:
      description: >-
        C({tool, status, error, gpus}) from C(rocm-smi --showcomputepartition
        --showmemorypartition); each of C(gpus) is C({index, compute, memory, notes}) (rocm-smi's
        device index; a mode it could not read is null, its line in C(notes)); status ok,
        no_gpus, unparsable, error, not_installed or skipped. Read with the rocm_smi source.
      type: dict
    driver:
      description: >-
        amdgpu state C({loaded, kind (dkms, inbox, none), version, initstate, source,
        dkms_helpers, dkms, blacklisted_in, secure_boot (enabled, disabled, unknown), mok_key (with
        Secure Boot on: enrolled, not_enrolled, no_key, unknown; else null)}).
      type: dict
    kfd:
      description: C({present, accessible}) for /dev/kfd and the current user.
      type: dict
    rocm_version:
      description: The ROCm version (amd-smi, else <rocm_path>/.info/version), or null.
      type: str
    rocm_installed:
      description: Whether rocminfo, amd-smi or the ROCm version file was found.
      type: bool
    problems:
      description: Clear messages for everything that looked wrong.
      type: list
      elements: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.instinct.vllm.plugins.module_utils.gpu_facts import (  # noqa: E402
    SOURCES,
    TOOLS,
    collect,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "sources": {
                "type": "list",
                "elements": "str",
                "choices": list(SOURCES),
                "default": list(SOURCES),
            },
            "search_paths": {"type": "list", "elements": "path", "default": ["/opt/rocm/bin"]},
            "rocm_path": {"type": "path", "default": "/opt/rocm"},
            "sys_module_dir": {"type": "path", "default": "/sys/module"},
            "modprobe_dir": {"type": "path", "default": "/etc/modprobe.d"},
            "efivars_dir": {"type": "path", "default": "/sys/firmware/efi/efivars"},
            "fail_on_problems": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    params = module.params
    opt_dirs = [*params["search_paths"], "/usr/sbin", "/sbin"]
    tools = {key: module.get_bin_path(binary, opt_dirs=opt_dirs) for key, binary in TOOLS.items()}

    def run(argv: list[str]) -> tuple[int, str, str]:
        rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
        return rc, out, err

    facts = collect(
        tools,
        run,
        sources=params["sources"],
        sys_module_dir=params["sys_module_dir"],
        modprobe_dir=params["modprobe_dir"],
        rocm_path=params["rocm_path"],
        efivars_dir=params["efivars_dir"],
    )
    result = {
        "changed": False,
        "gpu_facts": facts,
        "ansible_facts": {"instinct_vllm_gpu_facts": facts},
    }
    if params["fail_on_problems"] and facts["problems"]:
        module.fail_json(msg="; ".join(facts["problems"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
