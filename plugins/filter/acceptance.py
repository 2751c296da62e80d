# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for playbooks/acceptance.yml; the logic is in module_utils/acceptance and, for the
check fingerprint, plugin_utils/acceptance_fingerprint.py. Each filter is documented in the YAML
file of its name beside this one.

Usage::

    [matmul.result, platform.result, health.result | default(none), serve.result]
      | instinct.vllm.acceptance_report(node=inventory_hostname, stack='cpu', device='cpu',
                                        started=..., finished=..., secrets=[api_key])
        -> {node, stack, device, started, finished, status, summary, failures, checks: {...}}

``status`` is failed when any check failed or errored, ok when at least one passed, else
skipped; checks that did not run (tags) are left out; every secret is masked.

    serve.result | default(none) | instinct.vllm.acceptance_fingerprint_skip   -> '' or why not
    fingerprint_gate_result | default(none)
      | instinct.vllm.acceptance_fingerprint(skip=..., seconds=...)  -> the check fingerprint
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.instinct.vllm.plugins.module_utils.acceptance import build_report
from ansible_collections.instinct.vllm.plugins.plugin_utils.acceptance_fingerprint import (
    fingerprint_check,
    skip_reason,
)


def acceptance_report(
    results: Any,
    node: str = "",
    stack: str = "",
    device: str = "",
    started: str = "",
    finished: str = "",
    secrets: Any = None,
) -> dict[str, Any]:
    """The acceptance check results of a node -> its JSON report."""
    if not isinstance(results, (list, tuple)):
        raise AnsibleFilterError("instinct.vllm.acceptance_report: expects a list of results")
    return build_report(
        list(results), node, stack, device, started, finished, [str(s) for s in secrets or []]
    )


def _plain(value: Any) -> Any:
    """Plain dicts and lists of a templated value (Ansible's lazy containers cannot be copied
    by dataclasses.asdict)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def acceptance_fingerprint(result: Any, skip: str = "", seconds: Any = 0) -> dict[str, Any]:
    """Role fingerprint_gate's result (fingerprint_gate_result; none: not run) -> the check."""
    if result is not None and not isinstance(result, Mapping):
        raise AnsibleFilterError("instinct.vllm.acceptance_fingerprint: expects a dict or none")
    try:
        return fingerprint_check(_plain(result), str(skip or ""), float(seconds or 0))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"instinct.vllm.acceptance_fingerprint: {exc}") from exc


def acceptance_fingerprint_skip(serve: Any) -> str:
    """The serve check's result of the run (none: not run) -> '' or why the fingerprint cannot
    judge the node's service."""
    return skip_reason(_plain(serve))


class FilterModule:
    """instinct.vllm acceptance filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "acceptance_report": acceptance_report,
            "acceptance_fingerprint": acceptance_fingerprint,
            "acceptance_fingerprint_skip": acceptance_fingerprint_skip,
        }
