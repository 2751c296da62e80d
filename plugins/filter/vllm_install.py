# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters role vllm builds its pip calls and its plans with (controller side, pure).

Usage::

    {'index_url': vllm_pip_index_url, ..., 'constraints': [lock]} | instinct.vllm.vllm_pip_args
        -> ['--find-links=/opt/wheels', '--no-index', '--constraint', '/opt/vllm/...', ...]
    _vllm_stack | instinct.vllm.vllm_wheel_install(pip_args, extra_packages)
        -> {'name': ['vllm==0.20.1+rocm721'], 'extra_args': [..., '--extra-index-url', URL]}
    _vllm_stack | instinct.vllm.vllm_rocm_plan(method)
        -> {'rocm': true, 'reason': '...', 'amdsmi': true, 'triton': 'pytorch-triton-rocm==3.1.0',
            'toolchain': true, 'platform': 'rocm'}
    _vllm_stack | instinct.vllm.vllm_attention(method, ck_flash_attention)
        -> {'implementation': 'ck', 'environment': {'VLLM_USE_TRITON_FLASH_ATTN': '0'},
            'reason': '...'}
    ansible_play_hosts | instinct.vllm.vllm_source_builder(hostvars, key, preferred)
    patch_dirs | instinct.vllm.vllm_source_patches
        -> [{'name': '0001-x.patch', 'path': '/.../0001-x.patch', 'sha256': '...',
            'copy': '01-0001-x.patch'}, ...]

Documentation of each filter: the YAML file of the same name beside this one.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError


def _strs(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise AnsibleFilterError(f"{what}: expected a list of strings, got {value!r}")
    return [str(v) for v in value]


def vllm_pip_args(options: Mapping[str, Any]) -> list[str]:
    """pip options (argv words) from the role's vllm_pip_* variables and the constraint files."""
    if not isinstance(options, Mapping):
        raise AnsibleFilterError("vllm_pip_args: the input must be a mapping of pip options")
    o = dict(options)
    args: list[str] = []
    if o.get("index_url"):
        args += ["--index-url", str(o["index_url"])]
    args += [f"--extra-index-url={u}" for u in _strs(o.get("extra_index_urls"), "extra_index_urls")]
    args += [f"--find-links={u}" for u in _strs(o.get("find_links"), "find_links")]
    args += [f"--trusted-host={h}" for h in _strs(o.get("trusted_hosts"), "trusted_hosts")]
    if o.get("no_index"):
        args.append("--no-index")
    if o.get("cert"):
        args += ["--cert", str(o["cert"])]
    args += ["--cache-dir", str(o["cache_dir"])] if o.get("cache_dir") else ["--no-cache-dir"]
    for path in _strs(o.get("constraints"), "constraints"):
        if path:
            args += ["--constraint", path]
    if not o.get("compile", True):
        args.append("--no-compile")
    return [*args, "--disable-pip-version-check", "--timeout", "120"]


def vllm_wheel_install(
    stack: Mapping[str, Any], pip_args: Any, extra_packages: Any = None
) -> dict[str, list[str]]:
    """The requirements and pip options that install the stack's vLLM wheel.

    ``vllm.pip_spec`` (an exact ``+rocmNNN`` build) replaces ``package==version`` and
    ``vllm.index_url`` is added as an extra index, unless pip runs with ``--no-index``.
    """
    vllm = _vllm_block(stack)
    spec = vllm.get("pip_spec") or f"{vllm['package']}=={vllm['version']}"
    args = _strs(pip_args, "pip_args")
    if vllm.get("index_url") and "--no-index" not in args:
        args = [*args, "--extra-index-url", str(vllm["index_url"])]
    return {"name": [str(spec), *_strs(extra_packages, "extra_packages")], "extra_args": args}


def _vllm_block(stack: Any) -> Mapping[str, Any]:
    if not isinstance(stack, Mapping) or not isinstance(stack.get("vllm"), Mapping):
        raise AnsibleFilterError("the input must be a stack (the output of instinct.vllm.stack)")
    return stack["vllm"]


def vllm_rocm_plan(stack: Mapping[str, Any], method: str = "wheel") -> dict[str, Any]:
    """Which ROCm-only steps role vllm runs for this stack and install method, and why (not)."""
    vllm = _vllm_block(stack)
    name = stack.get("name", "?")
    source = vllm.get("source") if method == "source" else None
    target = (source or {}).get("target_device")
    if stack.get("rocm") is None:
        rocm, reason = False, f"stack {name} has no ROCm (rocm: null)"
    elif source is not None and target != "rocm":
        rocm, reason = False, f"stack {name} builds vLLM for target {target!r}, not rocm"
    else:
        rocm, reason = True, f"stack {name} runs on ROCm {stack['rocm'].get('version')}"
    triton = (stack.get("torch") or {}).get("triton")
    platform = vllm.get("platform") or ("rocm" if stack.get("rocm") is not None else None)
    return {
        "rocm": rocm,
        "reason": reason,
        # The binding every method needs on ROCm (vLLM detects ROCm only through it).
        "amdsmi": rocm,
        # Built from source: PyPI triton (PyPI's CUDA torch requires it) must not shadow the
        # torch index's one.
        "triton": triton if (rocm and source is not None and triton) else None,
        # hipcc compiles only in the source method.
        "toolchain": rocm and source is not None,
        "platform": platform,
    }


#: vLLM 0.6.6.post1's switch between its ROCm attention kernels (vllm/envs.py: true unless set
#: to something other than "true" or "1"; vllm/attention/backends/rocm_flash_attn.py: Triton
#: flash-attention when true, else CK flash-attention when flash_attn imports).
TRITON_FLASH_ATTN = "VLLM_USE_TRITON_FLASH_ATTN"


def vllm_attention(
    stack: Mapping[str, Any], method: str = "", ck_flash_attention: Any = False
) -> dict[str, Any]:
    """The attention implementation role vllm's install gives vLLM, and the environment the
    service needs to run it: ``ck`` when CK flash-attention is installed (the source method,
    a ROCm target, ``ck_flash_attention`` on), else ``default`` (vLLM's own choice). ``method``
    empty: the stack's install method."""
    vllm = _vllm_block(stack)
    method = method or str(vllm.get("install_method", "wheel"))
    plan = vllm_rocm_plan(stack, method)
    if not _truthy(ck_flash_attention):
        reason = "vLLM's default attention (vllm_source_ck_flash_attention is off)"
    elif not plan["rocm"]:
        reason = f"CK flash-attention is a ROCm kernel and {plan['reason']}"
    elif method != "source":
        reason = f"only the source method installs CK flash-attention, not method {method}"
    else:
        return {
            "implementation": "ck",
            "environment": {TRITON_FLASH_ATTN: "0"},
            "reason": f"CK flash-attention, which vLLM runs when {TRITON_FLASH_ATTN} is 0",
        }
    return {"implementation": "default", "environment": {}, "reason": reason}


def vllm_source_builder(
    play_hosts: Any, hostvars: Mapping[str, Any], key: str, preferred: str = ""
) -> str:
    """The host that compiles build ``key``: ``preferred`` if it needs the key, else the first
    play host whose ``_vllm_source_key`` is ``key`` and whose ``_vllm_source_pending`` is true;
    empty when no host needs it."""
    needing = []
    for host in _strs(play_hosts, "play_hosts"):
        hv = hostvars.get(host) or {}
        if hv.get("_vllm_source_key", "") == key and _truthy(hv.get("_vllm_source_pending")):
            needing.append(host)
    if preferred and preferred in needing:
        return preferred
    return needing[0] if needing else ""


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1", "on")
    return bool(value)


_COMMENT = re.compile(r"#.*$")


def vllm_source_patches(dirs: Any) -> list[dict[str, str]]:
    """The patch series of ``dirs`` (controller directories, in order): each directory's
    ``series`` file (one name a line, ``#`` comments), else its ``*.patch`` files sorted;
    each patch as ``{name, path, sha256, copy}`` (``copy``: ``NN-name``, its position first,
    the name the builder's copy gets)."""
    out = []
    for d in _strs(dirs, "dirs"):
        root = Path(d)
        if not root.is_dir():
            raise AnsibleFilterError(f"vllm_source_patches: {d} is not a directory")
        series = root / "series"
        if series.is_file():
            names = [_COMMENT.sub("", ln).strip() for ln in series.read_text().splitlines()]
            paths = [root / n for n in names if n]
        else:
            paths = sorted(root.glob("*.patch"))
        for p in paths:
            if not p.is_file():
                raise AnsibleFilterError(
                    f"vllm_source_patches: {series} names {p.name}, not in {d}"
                )
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
            copy = f"{len(out) + 1:02d}-{p.name}"
            out.append({"name": p.name, "path": str(p), "sha256": digest, "copy": copy})
    return out


class FilterModule:
    """instinct.vllm filters of role vllm."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "vllm_pip_args": vllm_pip_args,
            "vllm_wheel_install": vllm_wheel_install,
            "vllm_rocm_plan": vllm_rocm_plan,
            "vllm_attention": vllm_attention,
            "vllm_source_builder": vllm_source_builder,
            "vllm_source_patches": vllm_source_patches,
        }
