"""Acceptance checks of a vLLM node (playbooks/acceptance.yml): public facade over _acceptance/.

Per GPU a matmul on device "cuda" checked against the CPU; vLLM's own platform, attention
backend and the attention implementation that runs; amd-smi health (temperature, ECC, XGMI)
against thresholds; one completion from the node's model; the node's JSON report. On a stack
without GPU the GPU checks are skipped with the reason. The serve check's decision (use the
service, wait for it, a temporary server, or fail) is a pure function of the unit's systemd
state: `decide`.
"""

from __future__ import annotations

from ._acceptance.attention import judge_attention
from ._acceptance.checks import (
    NodeSpec,
    gpu_health,
    gpu_matmul,
    judge_matmul,
    model_shape,
    vllm_platform,
)
from ._acceptance.health import Thresholds, evaluate
from ._acceptance.probe import ProbeError, Runner, run_probe
from ._acceptance.result import STATUSES, CheckResult, build_report, overall, redact
from ._acceptance.serve import ServeSpec, complete, serve_check
from ._acceptance.unit import (
    FAIL,
    TEMPORARY,
    USE_SERVICE,
    WAIT,
    Decision,
    UnitState,
    UnitUnreadable,
    decide,
    parse_show,
    read_unit,
    settle,
)

CHECKS = ("gpu_matmul", "vllm_platform", "gpu_health", "serve")

__all__ = [
    "CHECKS",
    "FAIL",
    "STATUSES",
    "TEMPORARY",
    "USE_SERVICE",
    "WAIT",
    "CheckResult",
    "Decision",
    "NodeSpec",
    "ProbeError",
    "Runner",
    "ServeSpec",
    "Thresholds",
    "UnitState",
    "UnitUnreadable",
    "build_report",
    "complete",
    "decide",
    "evaluate",
    "gpu_health",
    "gpu_matmul",
    "judge_attention",
    "judge_matmul",
    "model_shape",
    "overall",
    "parse_show",
    "read_unit",
    "redact",
    "run_probe",
    "serve_check",
    "settle",
    "vllm_platform",
]
