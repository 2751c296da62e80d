"""Acceptance checks of a vLLM node (playbooks/acceptance.yml): public facade over _acceptance/.

Per GPU a matmul on device "cuda" checked against the CPU; vLLM's own platform, attention
backend and the attention implementation that runs; amd-smi health (temperature, ECC, XGMI)
against thresholds; one completion from the node's model; the node's JSON report. On a stack
without GPU the GPU checks are skipped with the reason.
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

CHECKS = ("gpu_matmul", "vllm_platform", "gpu_health", "serve")

__all__ = [
    "CHECKS",
    "STATUSES",
    "CheckResult",
    "NodeSpec",
    "ProbeError",
    "Runner",
    "ServeSpec",
    "Thresholds",
    "build_report",
    "complete",
    "evaluate",
    "gpu_health",
    "gpu_matmul",
    "judge_attention",
    "judge_matmul",
    "model_shape",
    "overall",
    "redact",
    "run_probe",
    "serve_check",
    "vllm_platform",
]
