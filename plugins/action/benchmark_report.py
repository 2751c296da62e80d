# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for instinct.vllm.benchmark_report: runs on the controller only (the logic
is in plugin_utils/benchmark_report.py)."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.instinct.vllm.plugins.plugin_utils.benchmark_report import (
    HAS_MATPLOTLIB,
    ResultError,
    ThresholdError,
    build_report,
)

ARGUMENT_SPEC: dict[str, Any] = {
    "results": {"type": "list", "elements": "path", "required": True},
    "nodes": {"type": "list", "elements": "str", "default": []},
    "dest": {"type": "path", "required": True},
    "meta": {"type": "dict", "default": {}},
    "thresholds": {"type": "dict", "default": {}},
    "threshold_variable": {"type": "str", "default": "benchmark_thresholds"},
    "baseline": {"type": "path"},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        if not HAS_MATPLOTLIB:
            raise AnsibleActionFail(
                "benchmark_report needs matplotlib on the controller "
                "(requirements/dev.txt pins it; recreate the venv with scripts/venv)"
            )
        if not args["results"]:
            raise AnsibleActionFail("results: no benchmark result file was fetched")
        try:
            report = build_report(
                args["results"],
                args["nodes"],
                args["dest"],
                args["meta"],
                args["thresholds"],
                args["baseline"],
                args["threshold_variable"],
            )
        except (ResultError, ThresholdError, OSError) as exc:
            raise AnsibleActionFail(str(exc)) from exc
        result.update(report)
        result["changed"] = True
        return result
