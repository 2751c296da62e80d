"""GPU facts of a host (public facade of the private package `_gpu_facts`).

Modules, other subsystems (diagnose, acceptance) and tests import from here; the collectors
(one per tool) and the parsers live in `_gpu_facts/` (collect.py, pci.py, rocm.py, driver.py)
and may change shape freely behind the names below.
"""

from __future__ import annotations

from ansible_collections.instinct.vllm.plugins.module_utils._gpu_facts.collect import (
    SOURCES,
    TOOLS,
    collect,
)
from ansible_collections.instinct.vllm.plugins.module_utils._gpu_facts.driver import (
    find_blacklist,
    parse_dkms_status,
    parse_lsmod,
    secure_boot_state,
)
from ansible_collections.instinct.vllm.plugins.module_utils._gpu_facts.rocm import (
    COMPUTE_PARTITIONS,
    MEMORY_PARTITIONS,
    parse_amd_smi_static,
    parse_rocm_smi_partitions,
    parse_rocminfo,
)

__all__ = [
    "COMPUTE_PARTITIONS",
    "MEMORY_PARTITIONS",
    "SOURCES",
    "TOOLS",
    "collect",
    "find_blacklist",
    "parse_amd_smi_static",
    "parse_dkms_status",
    "parse_lsmod",
    "parse_rocm_smi_partitions",
    "parse_rocminfo",
    "secure_boot_state",
]
