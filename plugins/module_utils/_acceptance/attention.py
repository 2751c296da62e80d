"""The attention implementation vLLM runs, and whether it is the one the install asked for.

vLLM 0.6.6.post1 on ROCm always selects the backend ROCM_FLASH (vllm/platforms/rocm.py), so its
name does not tell the kernels apart. Its ROCmFlashAttentionImpl runs Triton flash-attention
when vllm.envs.VLLM_USE_TRITON_FLASH_ATTN is true (the default), else CK flash-attention when
``from flash_attn import flash_attn_varlen_func`` works, else its naive SDPA attention
(vllm/attention/backends/rocm_flash_attn.py). Only CK flash-attention applies sliding windows.
"""

from __future__ import annotations

import shlex
import shutil
from typing import Any

from .probe import Runner

ROCM_FLASH = "ROCM_FLASH"
#: The variables that choose the attention kernel; taken from the installed unit when there is one.
ATTENTION_ENV = ("VLLM_ATTENTION_BACKEND", "VLLM_USE_TRITON_FLASH_ATTN")


def unit_environment(run: Runner, service: str) -> dict[str, str] | None:
    """The ``Environment=`` of the installed unit ``service``; None when no unit is loaded (or
    systemd cannot say)."""
    if shutil.which("systemctl") is None:
        return None
    argv = ["systemctl", "show", f"{service}.service", "--property=LoadState"]
    rc, out, _err = run([*argv, "--property=Environment"], "", {})
    props = dict(line.partition("=")[::2] for line in out.splitlines() if "=" in line)
    if rc != 0 or props.get("LoadState") != "loaded":
        return None
    try:
        words = shlex.split(props.get("Environment", ""))  # systemd quotes as a shell would
    except ValueError:
        return None
    return dict(word.partition("=")[::2] for word in words if "=" in word)


def probe_environment(env: dict[str, str], unit: dict[str, str] | None) -> dict[str, str]:
    """``env`` (what the service is given), its attention variables replaced by the installed
    unit's when there is a unit: that unit is what runs."""
    if unit is None:
        return dict(env)
    kept = {k: v for k, v in env.items() if k not in ATTENTION_ENV}
    return {**kept, **{k: unit[k] for k in ATTENTION_ENV if k in unit}}


def attention_impl(
    platform: str, backend: str | None, use_triton: bool | None, flash_attn_error: str | None
) -> str:
    """``triton``, ``ck`` or ``naive`` for vLLM 0.6's ROCm backend; else the backend's name.

    ``use_triton``: vLLM's own ``envs.VLLM_USE_TRITON_FLASH_ATTN`` (None: this vLLM has none);
    ``flash_attn_error``: empty when flash_attn imports, else why not.
    """
    if platform != "rocm" or backend != ROCM_FLASH or use_triton is None:
        return backend or "unknown"
    if use_triton:
        return "triton"
    return "naive" if flash_attn_error else "ck"


def attention_problem(
    impl: str, expected: str, env_value: str | None, flash_attn_error: str
) -> str:
    """Why ``impl`` contradicts the install (empty when it does not). ``expected``: ``ck`` when
    role vllm installed CK flash-attention, else ``default`` (vLLM's own choice is accepted)."""
    if expected != "ck" or impl == "ck":
        return ""
    wanted = "CK flash-attention is installed (vllm_source_ck_flash_attention)"
    if impl == "triton":
        shown = "unset (vLLM's default is true)" if env_value is None else repr(env_value)
        return (
            f"{wanted} but Triton flash-attention would run: the service's "
            f"VLLM_USE_TRITON_FLASH_ATTN is {shown}, it must be 0 (role vllm_service sets it)"
        )
    if impl == "naive":
        return (
            f"{wanted} but flash_attn does not import ({flash_attn_error}): vLLM would fall back "
            "to its naive attention"
        )
    return f"{wanted} but vLLM selects {impl}"


def judge_attention(out: dict[str, Any], expected: str) -> tuple[str, str]:
    """(attention_impl, problem) from the platform probe's result."""
    checked = out.get("flash_attn_error")
    flash_attn_error = "not checked" if checked is None else str(checked)
    impl = attention_impl(
        str(out.get("platform")),
        out.get("attention_backend"),
        out.get("use_triton_flash_attn"),
        flash_attn_error,
    )
    env_value = (out.get("env") or {}).get("VLLM_USE_TRITON_FLASH_ATTN")
    return impl, attention_problem(impl, expected, env_value, flash_attn_error)
