"""Acceptance checks of a vLLM node (playbooks/acceptance.yml): public facade over _acceptance/.

Per GPU a matmul on device "cuda" checked against the CPU; vLLM's own platform, attention
backend and the attention implementation that runs; amd-smi health (temperature, ECC, XGMI)
against thresholds; one completion from the node's model; the node's JSON report. On a stack
without GPU the GPU checks are skipped with the reason. The serve check's decision (use the
service, wait for it, a temporary server, or fail) is a pure function of the unit's systemd
state: `decide`.

AMD's pass bars: all-reduce and all-to-all bus bandwidth across the GPUs (rccl-tests'
definitions, a quick or a burn-in tier: `collectives`), the kernel log of the run against
ROCm/cvs' failure patterns (`kernel_log`), and the MEC firmware rule (`firmware`).
"""

from __future__ import annotations

from ._acceptance.attention import judge_attention
from ._acceptance.checks import (
    BURNIN,
    QUICK,
    TIERS,
    CollectiveSpec,
    NodeSpec,
    collectives,
    gpu_health,
    gpu_matmul,
    judge_collectives,
    judge_matmul,
    model_shape,
    vllm_platform,
)
from ._acceptance.collectives import Bar, bus_factor, judge, parse_rccl_tests
from ._acceptance.firmware import MEC_MINIMUM, firmware, judge_firmware, mec_versions
from ._acceptance.health import Thresholds, evaluate
from ._acceptance.kernel_log import judge_kernel_log, kernel_log, scan
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
from ._tls_client import TLS_REQUIRED_TOGETHER, TLS_SPEC, TlsClient, TlsConfigError

CHECKS = (
    "gpu_matmul",
    "vllm_platform",
    "gpu_health",
    "serve",
    "collectives",
    "firmware",
    "kernel_log",
)

__all__ = [
    "BURNIN",
    "CHECKS",
    "FAIL",
    "MEC_MINIMUM",
    "QUICK",
    "STATUSES",
    "TEMPORARY",
    "TIERS",
    "TLS_REQUIRED_TOGETHER",
    "TLS_SPEC",
    "USE_SERVICE",
    "WAIT",
    "Bar",
    "CheckResult",
    "CollectiveSpec",
    "Decision",
    "NodeSpec",
    "ProbeError",
    "Runner",
    "ServeSpec",
    "Thresholds",
    "TlsClient",
    "TlsConfigError",
    "UnitState",
    "UnitUnreadable",
    "build_report",
    "bus_factor",
    "collectives",
    "complete",
    "decide",
    "evaluate",
    "firmware",
    "gpu_health",
    "gpu_matmul",
    "judge",
    "judge_attention",
    "judge_collectives",
    "judge_firmware",
    "judge_kernel_log",
    "judge_matmul",
    "kernel_log",
    "mec_versions",
    "model_shape",
    "overall",
    "parse_rccl_tests",
    "parse_show",
    "read_unit",
    "redact",
    "run_probe",
    "scan",
    "serve_check",
    "settle",
    "vllm_platform",
]
