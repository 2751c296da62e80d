# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter for playbooks/acceptance.yml; the logic is in module_utils/acceptance.

Usage::

    [matmul.result, platform.result, health.result | default(none), serve.result]
      | instinct.vllm.acceptance_report(node=inventory_hostname, stack='cpu', device='cpu',
                                        started=..., finished=..., secrets=[api_key])
        -> {node, stack, device, started, finished, status, summary, failures, checks: {...}}

``status`` is failed when any check failed or errored, ok when at least one passed, else
skipped; checks that did not run (tags) are left out; every secret is masked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.instinct.vllm.plugins.module_utils.acceptance import build_report


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


class FilterModule:
    """instinct.vllm acceptance filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"acceptance_report": acceptance_report}
