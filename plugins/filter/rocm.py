# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for the role rocm; the logic is in plugin_utils/rocm_verify.py.

Documented in rocm_agents_check.yml and rocm_partitions_check.yml beside this file. Usage::

    _rocm_gpu.gpu_facts | instinct.vllm.rocm_agents_check(instinct_vllm_stack_resolved.gpu_archs)
    _rocm_gpu.gpu_facts | instinct.vllm.rocm_partitions_check
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.instinct.vllm.plugins.plugin_utils.rocm_verify import (
    agents_check,
    partitions_check,
)


def rocm_agents_check(facts: Any, archs: Any) -> dict[str, Any]:
    """``{ok, problems, mode, partitions}``: the GPUs ROCm sees against lspci and the stack."""
    if not isinstance(facts, dict):
        raise AnsibleFilterError("rocm_agents_check: the input must be gpu_facts' result")
    if not isinstance(archs, list):
        raise AnsibleFilterError("rocm_agents_check: archs must be a list")
    return agents_check(facts, [str(a) for a in archs])


def rocm_partitions_check(facts: Any) -> dict[str, Any]:
    """``{ok, problems, compute, memory, summary}``: rocm-smi's partition modes, alike and known."""
    if not isinstance(facts, dict):
        raise AnsibleFilterError("rocm_partitions_check: the input must be gpu_facts' result")
    return partitions_check(facts)


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "rocm_agents_check": rocm_agents_check,
            "rocm_partitions_check": rocm_partitions_check,
        }
