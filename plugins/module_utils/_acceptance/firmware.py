"""The MEC firmware rule of InferenceX's MI300X recipes: below MEC version 177, RCCL cannot
reclaim some scratch memory and crashes unless ``HSA_NO_SCRATCH_RECLAIM=1`` is set
(SemiAnalysisAI/InferenceX benchmarks/gptoss_fp4_mi300x.sh, which reads the first MEC line of
``rocm-smi --showfw``; an unreadable version is treated as old)."""

from __future__ import annotations

import re

from .probe import Runner, tail
from .result import ERROR, FAILED, OK, SKIPPED, CheckResult

MEC_MINIMUM = 177
VARIABLE = "HSA_NO_SCRATCH_RECLAIM"
# "GPU[0]		: MEC firmware version: 	138" (MEC2 is a different line)
_MEC = re.compile(r"^GPU\[(\d+)\]\s*:\s*MEC firmware version:\s*(\d+)\s*$", re.M)


def mec_versions(text: str) -> dict[int, int]:
    """MEC firmware version per GPU index from ``rocm-smi --showfw`` (or ``rocm-smi -a``)."""
    return {int(gpu): int(version) for gpu, version in _MEC.findall(text)}


def judge_firmware(text: str, env: dict[str, str], minimum: int = MEC_MINIMUM) -> CheckResult:
    """Failed when a GPU's MEC firmware is below ``minimum`` (or unreadable) and the service's
    environment does not set HSA_NO_SCRATCH_RECLAIM=1."""
    versions = mec_versions(text)
    detail = {"mec": versions, "minimum": minimum, VARIABLE: env.get(VARIABLE)}
    old = {gpu: v for gpu, v in versions.items() if v < minimum}
    if versions and not old:
        low = min(versions.values())
        return CheckResult("firmware", OK, f"MEC firmware {low} >= {minimum} on every GPU", detail)
    why = (
        f"MEC firmware {min(old.values())} below {minimum} on GPU(s) {sorted(old)}"
        if old
        else "no MEC firmware version in rocm-smi --showfw"
    )
    if env.get(VARIABLE) == "1":
        return CheckResult("firmware", OK, f"{why}; {VARIABLE}=1 is set", detail)
    reason = (
        f"{why}: RCCL needs {VARIABLE}=1 there (set it in vllm_service_environment, "
        "or update the GPU firmware)"
    )
    return CheckResult("firmware", FAILED, reason, detail)


def firmware(
    run: Runner,
    env: dict[str, str],
    skip_reason: str = "",
    rocm_smi: str = "/opt/rocm/bin/rocm-smi",
    minimum: int = MEC_MINIMUM,
) -> CheckResult:
    """The node's MEC firmware (``rocm_smi --showfw``) against the rule, with the service's
    environment ``env``; skipped with ``skip_reason`` on a stack without GPU."""
    if skip_reason:
        return CheckResult("firmware", SKIPPED, skip_reason)
    rc, out, err = run([rocm_smi, "--showfw"], "", {})
    if rc != 0:
        reason = f"{rocm_smi} --showfw exited {rc}: {tail(err or out, 3)}"
        return CheckResult("firmware", ERROR, reason)
    return judge_firmware(out, env, minimum)
