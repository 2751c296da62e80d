"""The GPU and platform checks: each runs a probe in the node's venv and judges its result."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import probes
from .attention import judge_attention, probe_environment, unit_environment
from .collectives import ALL_REDUCE, ALL_TO_ALL, HARNESS, Bar, judge, judge_burnin
from .health import Thresholds, evaluate
from .probe import ProbeError, Runner, run_probe
from .result import ERROR, FAILED, OK, SKIPPED, CheckResult

# vLLM's platform name for each stack device (files/stacks.yml: rocm section or none)
EXPECTED_PLATFORM = {"rocm": "rocm", "cpu": "cpu"}


@dataclass
class NodeSpec:
    device: str  # rocm | cpu
    python: str
    stack: str = ""
    env: dict[str, str] = field(default_factory=dict)
    expected_gpus: int = 0

    @property
    def gpu_skip_reason(self) -> str:
        if self.device == "rocm":
            return ""
        return f"stack {self.stack or self.device!r} has no GPU (device {self.device})"


def _probe(name: str, node: NodeSpec, run: Runner, source: str, args: dict) -> Any:
    """The probe's result, or an ERROR CheckResult naming why it did not run."""
    start = time.monotonic()
    if not Path(node.python).is_file():
        reason = f"no venv interpreter at {node.python} (role vllm installs it)"
        return CheckResult(name, ERROR, reason, {}, 0.0)
    try:
        # read-only: no __pycache__ written into the node's venv
        return run_probe(
            run, node.python, source, args, {"PYTHONDONTWRITEBYTECODE": "1", **node.env}
        )
    except ProbeError as exc:
        return CheckResult(name, ERROR, str(exc), {}, time.monotonic() - start)


def gpu_matmul(
    node: NodeSpec, run: Runner, size: int = 1024, tolerance: float = 1e-3, device: str = "cuda"
) -> CheckResult:
    if node.gpu_skip_reason:
        return CheckResult("gpu_matmul", SKIPPED, node.gpu_skip_reason)
    start = time.monotonic()
    out = _probe("gpu_matmul", node, run, probes.MATMUL, {"size": size, "device": device})
    if isinstance(out, CheckResult):
        return out
    result = judge_matmul(out, tolerance, device, node.expected_gpus)
    result.seconds = time.monotonic() - start
    return result


def judge_matmul(
    out: dict[str, Any], tolerance: float, device: str = "cuda", expected_gpus: int = 0
) -> CheckResult:
    """The matmul probe's result against the tolerance (relative to the largest element)."""
    problems = []
    if device == "cuda" and not out.get("hip"):
        problems.append(f"torch {out.get('torch')} is not a ROCm build (torch.version.hip unset)")
    if out.get("error"):
        problems.append(out["error"])
    gpus = [dict(g) for g in out.get("gpus", [])]
    if expected_gpus and len(gpus) != expected_gpus:
        problems.append(f"torch sees {len(gpus)} GPUs, expected {expected_gpus}")
    for gpu in gpus:
        gpu["ok"] = "error" not in gpu and gpu["rel_error"] <= tolerance
        if "error" in gpu:
            problems.append(f"GPU {gpu['index']}: {gpu['error']}")
        elif not gpu["ok"]:
            problems.append(
                f"GPU {gpu['index']}: relative error {gpu['rel_error']:.2e} above {tolerance:g}"
            )
    if not gpus and not problems:
        problems.append("no GPU to run on")
    detail = {**out, "gpus": gpus, "tolerance": tolerance}
    if problems:
        return CheckResult("gpu_matmul", FAILED, "; ".join(problems), detail)
    worst = max(g["rel_error"] for g in gpus)
    size = out.get("size")
    reason = f"{len(gpus)} x {size}x{size} float32 matmul match the CPU (worst {worst:.1e})"
    return CheckResult("gpu_matmul", OK, reason, detail)


def model_shape(model_path: str, dtype: str) -> dict[str, Any]:
    """head_size, num_heads and dtype for the attention selector, from the model's config.json
    (defaults when the node has no model directory yet)."""
    shape: dict[str, Any] = {"head_size": 128, "num_heads": None, "dtype": dtype}
    config_file = Path(model_path, "config.json") if model_path else None
    if config_file and config_file.is_file():
        config = json.loads(config_file.read_text(encoding="utf-8"))
        heads = config.get("num_attention_heads")
        shape["num_heads"] = heads
        shape["head_size"] = config.get("head_dim") or (
            config["hidden_size"] // heads if heads and config.get("hidden_size") else 128
        )
        if dtype in ("", "auto"):
            shape["dtype"] = config.get("torch_dtype") or "float16"
    if shape["dtype"] in ("", "auto"):
        shape["dtype"] = "float16"
    shape["dtype"] = {"half": "float16", "float": "float32"}.get(shape["dtype"], shape["dtype"])
    return shape


def vllm_platform(
    node: NodeSpec,
    run: Runner,
    model_path: str = "",
    dtype: str = "auto",
    kv_cache_dtype: str = "auto",
    block_size: int = 16,
    expected_attention: str = "default",
    attention_env: dict[str, str] | None = None,
    service: str = "",
) -> CheckResult:
    """vLLM's platform, its attention backend and the attention implementation that runs, with
    the service's environment: ``attention_env`` (role vllm's fact vllm_attention) under
    ``node.env``, as role vllm_service merges them, its attention variables replaced by the
    installed unit's when ``service`` has a unit. ``expected_attention``: ``ck`` when CK
    flash-attention is installed, else ``default``."""
    start = time.monotonic()
    args = {
        **model_shape(model_path, dtype),
        "kv_cache_dtype": kv_cache_dtype,
        "block_size": block_size,
    }
    unit = unit_environment(run, service) if service else None
    service_env = {**(attention_env or {}), **node.env}
    probed = replace(node, env=probe_environment(service_env, unit))
    out = _probe("vllm_platform", probed, run, probes.PLATFORM, args)
    if isinstance(out, CheckResult):
        return out
    expected = EXPECTED_PLATFORM.get(node.device, node.device)
    detail = {
        **out,
        "expected_platform": expected,
        "selector_args": args,
        "expected_attention": expected_attention,
        "attention_env_from": f"{service}.service" if unit is not None else "the inventory",
    }
    seconds = time.monotonic() - start
    backend = out.get("attention_backend") or f"unknown ({out.get('attention_backend_error')})"
    if out.get("platform") != expected:
        reason = (
            f"vLLM {out.get('vllm')} resolved platform {out.get('platform')!r} "
            f"({out.get('platform_class')}), the stack expects {expected!r}"
        )
        if expected == "rocm":
            reason += ": vLLM 0.6.x finds ROCm only through the amdsmi binding in its venv"
        return CheckResult("vllm_platform", FAILED, reason, detail, seconds)
    impl, problem = judge_attention(out, expected_attention)
    detail["attention_impl"] = impl
    if problem:
        return CheckResult("vllm_platform", FAILED, problem, detail, seconds)
    reason = f"vLLM {out.get('vllm')}: platform {expected}, attention backend {backend}"
    if impl != backend:
        reason += f", attention_impl {impl}"
    return CheckResult("vllm_platform", OK, reason, detail, seconds)


def gpu_health(node: NodeSpec, run: Runner, limits: Thresholds) -> CheckResult:
    if node.gpu_skip_reason:
        return CheckResult("gpu_health", SKIPPED, node.gpu_skip_reason)
    start = time.monotonic()
    out = _probe("gpu_health", node, run, probes.HEALTH, {})
    if isinstance(out, CheckResult):
        return out
    if node.expected_gpus and not limits.expected_gpus:
        limits = Thresholds(**{**limits.__dict__, "expected_gpus": node.expected_gpus})
    healthy, reason, detail = evaluate(out, limits)
    status = OK if healthy else FAILED
    return CheckResult("gpu_health", status, reason, detail, time.monotonic() - start)


QUICK = "quick"
BURNIN = "burnin"
TIERS = (QUICK, BURNIN)


@dataclass
class CollectiveSpec:
    """The collective check's bars and tier (playbook variables acceptance_allreduce_*,
    acceptance_alltoall_*, acceptance_tier, acceptance_burnin_seconds)."""

    allreduce: Bar = field(default_factory=lambda: Bar(ALL_REDUCE, 8 << 30, 304.0))
    alltoall: Bar = field(default_factory=lambda: Bar(ALL_TO_ALL, 8 << 30, 320.0))
    tier: str = QUICK
    burnin_seconds: float = 3600.0
    warmup: int = 5
    iters: int = 20
    timeout: float = 900.0
    backend: str = ""  # nccl (RCCL) on a GPU node; gloo runs the same harness on CPUs
    ranks: int = 0  # 0: every GPU torch sees

    def probe_args(self, device: str) -> dict[str, Any]:
        burnin = self.burnin_seconds if self.tier == BURNIN else 0
        sizes = sorted({self.allreduce.size, self.alltoall.size})
        return {
            "backend": self.backend or ("nccl" if device == "rocm" else "gloo"),
            "ranks": self.ranks,
            "ops": [ALL_REDUCE, ALL_TO_ALL],
            "sizes": sizes,
            "warmup": self.warmup,
            "iters": self.iters,
            "burnin_seconds": burnin,
            "burnin_size": max(sizes),
            "timeout": self.timeout + burnin,
        }


def judge_collectives(out: dict[str, Any], spec: CollectiveSpec) -> CheckResult:
    """The harness's result against both bars (and, in the burn-in tier, every repeated run)."""
    if out.get("error"):
        return CheckResult("collectives", FAILED, out["error"], out)
    verdicts = []
    for limit in (spec.allreduce, spec.alltoall):
        rows = [r for r in out.get("rows", []) if r["op"] == limit.op]
        verdicts.append(judge(rows, limit))
        if spec.tier == BURNIN:
            verdicts.append(judge_burnin(out.get("burnin", []), limit))
    detail = {**out, "tier": spec.tier, "bars": [spec.allreduce.__dict__, spec.alltoall.__dict__]}
    failed = [reason for passed, reason in verdicts if not passed]
    prefix = f"{out.get('ranks')} ranks over {out.get('backend')}: "
    if failed:
        return CheckResult("collectives", FAILED, prefix + "; ".join(failed), detail)
    reasons = "; ".join(verdict[1] for verdict in verdicts)
    return CheckResult("collectives", OK, prefix + reasons, detail)


def collectives(node: NodeSpec, run: Runner, spec: CollectiveSpec) -> CheckResult:
    """All-reduce and all-to-all bus bandwidth across the node's GPUs (RCCL through
    torch.distributed), in the quick or the burn-in tier."""
    if node.gpu_skip_reason and not spec.backend:
        return CheckResult("collectives", SKIPPED, node.gpu_skip_reason)
    start = time.monotonic()
    out = _probe("collectives", node, run, HARNESS, spec.probe_args(node.device))
    if isinstance(out, CheckResult):
        return out
    result = judge_collectives(out, spec)
    result.seconds = time.monotonic() - start
    return result
