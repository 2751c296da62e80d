# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for the role preflight; the logic is in plugin_utils/preflight.py.

Each filter is documented in the YAML file of its name beside this one (preflight_evaluate.yml,
mount_for.yml). Usage::

    instinct_vllm_stack_resolved | instinct.vllm.preflight_evaluate(ansible_facts,
        preflight_gpus, settings, instinct_vllm_stack_matrix)
    '/srv/models' | instinct.vllm.mount_for(ansible_facts.mounts)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.instinct.vllm.plugins.plugin_utils import preflight as pf
from ansible_collections.instinct.vllm.plugins.plugin_utils.stack_matrix import StackError


def preflight_evaluate(
    stack: Any, host: Any, gpus: Any, settings: Any, stacks: Any = None
) -> dict[str, Any]:
    """Every preflight check for this host: ``{ok, errors, warnings, checks}``."""
    for name, value in (
        ("stack", stack),
        ("host facts", host),
        ("gpus", gpus),
        ("settings", settings),
    ):
        if not isinstance(value, dict):
            raise AnsibleFilterError(f"preflight_evaluate: {name} must be a mapping")
    if stacks is not None and not isinstance(stacks, dict):
        raise AnsibleFilterError(
            "preflight_evaluate: stacks must be a mapping (instinct_vllm_stack_matrix)"
        )
    try:
        return pf.evaluate(stack, host, gpus, settings, stacks or None)
    except StackError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def mount_for(path: str, mounts: Any) -> dict[str, Any] | None:
    """The entry of ansible_facts.mounts that holds ``path`` (None if none)."""
    found = pf.mount_for(str(path), list(mounts or []))
    return dict(found) if found is not None else None


class FilterModule:
    """instinct.vllm preflight filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"preflight_evaluate": preflight_evaluate, "mount_for": mount_for}
