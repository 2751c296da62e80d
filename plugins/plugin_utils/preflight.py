# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preflight checks: does this host, its GPUs and the requested serving setup fit the stack?

Standard library only (plus stack_matrix, which reads files/stacks.yml with PyYAML on the
controller). :func:`evaluate` returns every finding at once so one run shows all problems;
each message names the fact or variable it is about and the fix. Used by the role preflight
through the filter ``instinct.vllm.preflight_evaluate``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.instinct.vllm.plugins.plugin_utils import model_size
from ansible_collections.instinct.vllm.plugins.plugin_utils import stack_matrix as sm

GIB = 1024**3
#: The key Ubuntu's DKMS signs modules with (https://wiki.ubuntu.com/UEFI/SecureBoot/DKMS).
MOK_KEY = "/var/lib/shim-signed/mok/MOK.der"


def mount_for(path: str, mounts: list[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The mount (from ansible_facts.mounts) that holds ``path``: the longest mount point
    that is ``path`` or a parent of it. ``path`` need not exist yet."""
    best: Mapping[str, Any] | None = None
    norm = "/" + str(path).strip("/")
    for mount in mounts or []:
        point = str(mount.get("mount", ""))
        point_norm = "/" + point.strip("/")
        inside = (
            point_norm == "/" or norm == point_norm or norm.startswith(point_norm.rstrip("/") + "/")
        )
        if inside and (best is None or len(point_norm) > len("/" + str(best["mount"]).strip("/"))):
            best = mount
    return best


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


class _Findings:
    def __init__(self) -> None:
        self.checks: list[dict[str, Any]] = []

    def add(self, name: str, ok: bool, msg: str = "", level: str = "error") -> None:
        entry = {"name": name, "ok": ok, "level": "ok" if ok else level, "msg": "" if ok else msg}
        self.checks.append(entry)

    def result(self) -> dict[str, Any]:
        return {
            "ok": not any(c["level"] == "error" for c in self.checks),
            "errors": [c["msg"] for c in self.checks if c["level"] == "error"],
            "warnings": [c["msg"] for c in self.checks if c["level"] == "warning"],
            "checks": self.checks,
        }


def _check_os(
    f: _Findings, stack: Mapping[str, Any], host: Mapping[str, Any], stacks: Mapping[str, Any]
) -> None:
    dist = str(host.get("distribution", ""))
    version = str(host.get("distribution_version", ""))
    kernel = str(host.get("kernel", ""))
    check = sm.check_os(stack, dist, version, kernel, sm.ga_kernels())
    if check["ok"]:
        f.add("os", True)
        return
    flavour = check["flavour"] if check["os_supported"] else None
    others = [
        n
        for n in sm.for_os(stacks, dist, version, flavour, series=check["series"])
        if n != stack["name"]
    ]
    fix = (
        f"set instinct_vllm_stack to a stack that supports it ({', '.join(others)})"
        if others
        else "no stack in files/stacks.yml supports it: add one (instinct_vllm_stacks_extra)"
    )
    if check["os_supported"]:
        ga = sm.ga_kernels().get(f"{dist} {version}")
        boot = f"boot the {dist} {version} GA kernel ({ga}, e.g. linux-generic)" if ga else ""
        fix = f"{boot} or {fix}" if boot and "ga" in check["supported_flavours"] else fix
    f.add(
        "os",
        False,
        f"OS/kernel (ansible_facts distribution, distribution_version, kernel): {check['msg']}. "
        f"Fix: {fix}.",
    )


def _check_cpu(f: _Findings, stack: Mapping[str, Any], host: Mapping[str, Any]) -> None:
    arch = host.get("architecture")
    ok = arch in stack["cpu_archs"]
    f.add(
        "cpu_arch",
        ok,
        f"CPU architecture (ansible_facts.architecture) is {arch}; stack '{stack['name']}' "
        f"supports {', '.join(stack['cpu_archs'])}.",
    )


def _check_memory(f: _Findings, host: Mapping[str, Any], min_gib: float) -> None:
    total_mb = host.get("memtotal_mb")
    if not isinstance(total_mb, (int, float)) or isinstance(total_mb, bool):
        f.add("memory", False, "RAM unknown (ansible_facts.memtotal_mb missing).", "warning")
        return
    have = round(total_mb / 1024, 1)
    f.add(
        "memory",
        have >= min_gib,
        f"RAM (ansible_facts.memtotal_mb) is {have} GiB; preflight_min_memory_gib asks for "
        f"{min_gib} GiB. Fix: a host with more memory, or lower preflight_min_memory_gib "
        f"(the vLLM source build also needs memory per parallel compile job).",
    )


def _check_disks(
    f: _Findings,
    host: Mapping[str, Any],
    requirements: list[Mapping[str, Any]],
    name: str = "",
    variables: str = "preflight_disk_requirements",
) -> None:
    mounts = host.get("mounts") or []
    for req in requirements:
        path, need = str(req["path"]), float(req["min_free_gib"])
        purpose = req.get("purpose") or "space"
        mount = mount_for(path, mounts)
        check = name or f"disk:{path}"
        if mount is None or not isinstance(mount.get("size_available"), (int, float)):
            f.add(
                check,
                False,
                f"free space for {path} ({purpose}) unknown: no mount in ansible_facts.mounts "
                f"holds it ({variables}).",
                "warning",
            )
            continue
        free = round(mount["size_available"] / GIB, 1)
        f.add(
            check,
            free >= need,
            f"{free} GiB free on {mount['mount']} for {path} ({purpose}); "
            f"{need} GiB needed ({variables}). Fix: free space or move {path} "
            f"to a larger filesystem.",
        )


def _model_size_gib(size_gib: float, config: Mapping[str, Any] | None) -> tuple[float | None, str]:
    """The model's weights in GiB: ``size_gib`` when given, else derived from its config.json
    (plugin_utils/model_size.py); (None, why) when neither says."""
    if size_gib > 0:
        return size_gib, "preflight_model_size_gib"
    if not config:
        return None, ""
    size, why = model_size.weight_bytes(config)
    if size is None:
        return None, why
    return round(size / GIB, 1), "derived from the model's config.json shape and torch_dtype"


def _check_model_disk(f: _Findings, host: Mapping[str, Any], settings: Mapping[str, Any]) -> None:
    """Room for every copy of the model written on the node: the source (unless it is already
    there) and the converted copy."""
    path = str(settings.get("model_disk_path") or "")
    copies = [str(c) for c in settings.get("model_copies") or []]
    if not path or not copies:
        return
    config = settings.get("model_config") or None
    size, origin = _model_size_gib(float(settings.get("model_size_gib") or 0), config)
    if size is None:
        if origin:  # a config.json that does not tell the size
            msg = f"the model's size is unknown ({origin}): set preflight_model_size_gib."
            f.add("disk:model", False, msg, "warning")
        return
    purpose = f"the model, {size} GiB ({origin}), {len(copies)} x: {' + '.join(copies)}"
    requirement = {"path": path, "min_free_gib": round(size * len(copies), 1), "purpose": purpose}
    variables = "preflight_model_size_gib, preflight_model_copies, preflight_model_disk_path"
    _check_disks(f, host, [requirement], name="disk:model", variables=variables)


def _check_gpu_count(
    f: _Findings, stack: Mapping[str, Any], gpus: Mapping[str, Any], expected: int | None
) -> bool:
    """gpu_count; False when no GPU was found (the other GPU checks then say nothing)."""
    count = int(gpus.get("count") or 0)
    if count == 0:
        sources = (
            f"pci: {gpus.get('pci', {}).get('status', '?')}, "
            f"rocminfo: {gpus.get('rocminfo', {}).get('status', '?')}"
        )
        problems = "; ".join(gpus.get("problems") or [])
        f.add(
            "gpu_count",
            False,
            f"no AMD Instinct GPU found (preflight_gpus.count is 0; {sources}"
            f"{'; ' + problems if problems else ''}); stack '{stack['name']}' needs "
            f"{'/'.join(stack['gpu_archs'])} GPUs. Fix: check `lspci -nn -d 1002:` on the host, "
            f"or use a stack without GPUs (instinct_vllm_stack: cpu).",
        )
        return False
    if expected is not None and count != expected:
        f.add(
            "gpu_count",
            False,
            f"{count} GPU(s) found (preflight_gpus.count) but preflight_gpu_count expects "
            f"{expected}. Fix: check the missing GPUs (`lspci -nn -d 1002:`, dmesg) or set "
            f"preflight_gpu_count.",
        )
    else:
        f.add("gpu_count", True)
    return True


def _check_gpu_archs(f: _Findings, stack: Mapping[str, Any], gpus: Mapping[str, Any]) -> None:
    wanted_archs = list(stack["gpu_archs"])
    unknown = [g for g in gpus.get("gpus", []) if not g.get("arch")]
    bad = sorted({g["arch"] for g in gpus.get("gpus", []) if g.get("arch")} - set(wanted_archs))
    if not (unknown or bad):
        f.add("gpu_arch", True)
        return
    named = sorted({str(g.get("product")) for g in unknown})
    f.add(
        "gpu_arch",
        False,
        f"GPU archs (preflight_gpus.archs) {', '.join(bad) or ''}"
        f"{' and unknown devices ' + ', '.join(named) if named else ''} are not supported "
        f"by stack '{stack['name']}' ({', '.join(wanted_archs)}). Fix: pick a stack whose "
        f"gpu_archs include them (instinct_vllm_stack).",
    )


def _check_gpu_vram(f: _Findings, stack: Mapping[str, Any], gpus: Mapping[str, Any]) -> None:
    min_vram = stack.get("min_vram_gib_per_gpu")
    small = [
        g
        for g in gpus.get("gpus", [])
        if min_vram and isinstance(g.get("vram_gib"), (int, float)) and g["vram_gib"] < min_vram
    ]
    f.add(
        "gpu_vram",
        not small,
        f"{len(small)} GPU(s) have less than the stack's min_vram_gib_per_gpu ({min_vram} GiB): "
        + ", ".join(f"{g.get('bdf')}: {g.get('vram_gib')} GiB" for g in small),
    )


def _check_gpus(
    f: _Findings, stack: Mapping[str, Any], gpus: Mapping[str, Any], expected: int | None
) -> None:
    if not stack["gpu_archs"]:  # a stack without GPUs (cpu): any count, GPUs are not used
        f.add("gpu_count", True)
        return
    if _check_gpu_count(f, stack, gpus, expected):
        _check_gpu_archs(f, stack, gpus)
        _check_gpu_vram(f, stack, gpus)


def _check_parallel(
    f: _Findings,
    stack: Mapping[str, Any],
    gpus: Mapping[str, Any],
    tp: int,
    heads: int | None,
    instances: int = 1,
) -> None:
    """TP splits the heads; the instances (each TP GPUs) split the GPUs between them."""
    # the GPUs the engines run on; 0 (unknown, or a stack without GPUs): any count fits
    count = int(gpus.get("count") or 0) if stack["gpu_archs"] else 0
    msg = (
        _parallel_sizes_problem(tp, instances)
        or _gpu_split_problem(count, tp, heads, instances)
        or _heads_problem(count, tp, heads)
    )
    f.add("tensor_parallel", not msg, msg)


def _parallel_sizes_problem(tp: int, instances: int) -> str:
    if tp < 1:
        return f"preflight_tensor_parallel_size must be >= 1 (is {tp})."
    if instances < 1:
        return (
            f"vllm_service_instances={instances} (preflight_instances) must be >= 1. "
            "Fix: set vllm_service_instances to the number of vLLM engines per node (1: one)."
        )
    return ""


def _gpu_split_problem(count: int, tp: int, heads: int | None, instances: int) -> str:
    if count == 0:
        return ""
    if instances > 1:
        return _instances_problem(count, tp, heads, instances)
    if tp <= count and count % tp == 0:
        return ""
    fits = [d for d in divisors(count) if heads is None or heads % d == 0]
    return (
        f"preflight_tensor_parallel_size={tp} does not divide the {count} GPU(s) found "
        f"(preflight_gpus.count). Fix: use one of {', '.join(map(str, fits))}."
    )


def _instances_problem(count: int, tp: int, heads: int | None, instances: int) -> str:
    if instances * tp == count:
        return ""
    fits_heads = [d for d in divisors(count) if heads is None or heads % d == 0]
    fixes = [f"vllm_service_instances: {count // tp} (fits TP {tp})"] if tp in fits_heads else []
    if count % instances == 0 and count // instances in fits_heads:
        fixes.append(
            f"preflight_tensor_parallel_size={count // instances} (the service's "
            f"tensor-parallel-size, vllm_service_flags; fits {instances} instances)"
        )
    pairs = ", ".join(f"{count // d} x {d}" for d in fits_heads)
    fixes.append(f"instances x TP to one of {pairs}")
    return (
        f"vllm_service_instances={instances} (preflight_instances) x "
        f"preflight_tensor_parallel_size={tp} is {instances * tp} GPU(s), but {count} GPU(s) "
        f"were found (preflight_gpus.count): each instance takes its own {tp} GPU(s) and the "
        f"instances must use every GPU exactly once. Fix: set {', or '.join(fixes)}."
    )


def _heads_problem(count: int, tp: int, heads: int | None) -> str:
    if heads is None or heads % tp == 0:
        return ""
    choices = [d for d in divisors(heads) if count % d == 0]
    return (
        f"preflight_tensor_parallel_size={tp} does not divide the model's "
        f"num_attention_heads={heads} (preflight_model_num_attention_heads): vLLM splits "
        f"the heads across the GPUs. Fix: use one of {', '.join(map(str, choices))}."
    )


def _check_model(
    f: _Findings, stack: Mapping[str, Any], arch: str | None, stacks: Mapping[str, Any]
) -> None:
    if not arch:
        f.add("model_architecture", True)
        return
    if arch in stack["model_architectures"]:
        f.add("model_architecture", True)
        return
    serving = sm.serving(stacks, arch)
    fix = (
        f"set instinct_vllm_stack to one of: {', '.join(serving)}"
        if serving
        else "no stack in files/stacks.yml serves it"
    )
    extra_note = ""
    if arch == "GptOssForCausalLM":
        extra_note = (
            " (gpt-oss needs vLLM >= 0.10.1 on ROCm >= 6.3; it is served as published, "
            "no conversion)"
        )
    f.add(
        "model_architecture",
        False,
        f"model architecture {arch} (preflight_model_architecture) is not served by stack "
        f"'{stack['name']}' (serves {', '.join(stack['model_architectures'])}){extra_note}. "
        f"Fix: {fix}.",
    )


def _check_driver(
    f: _Findings,
    stack: Mapping[str, Any],
    gpus: Mapping[str, Any],
    secure_boot: str,
    policy: str,
) -> None:
    rocm = stack.get("rocm")
    if not rocm:
        f.add("amdgpu_blacklist", True)
        f.add("secure_boot", True)
        return
    blacklisted = (gpus.get("driver") or {}).get("blacklisted_in") or []
    f.add(
        "amdgpu_blacklist",
        not blacklisted,
        f"amdgpu is blacklisted in {', '.join(blacklisted)} (preflight_gpus.driver."
        f"blacklisted_in): ROCm runs on the amdgpu driver, the blacklist disables every GPU. "
        f"Fix: remove those lines (then update-initramfs -u).",
    )
    dkms = any("dkms" in p for p in rocm.get("driver_packages") or [])
    mok = (gpus.get("driver") or {}).get("mok_key") or "unknown"
    if not dkms or secure_boot != "enabled" or policy == "ignore" or mok == "enrolled":
        f.add("secure_boot", True)
        return
    state = {
        "not_enrolled": f"is not enrolled ({MOK_KEY})",
        "no_key": f"does not exist yet ({MOK_KEY})",
    }.get(mok, f"could not be checked ({MOK_KEY}, mokutil --test-key)")
    f.add(
        "secure_boot",
        False,
        "Secure Boot is enabled, the stack installs amdgpu-dkms and the DKMS signing key "
        f"(preflight_gpus.driver.mok_key) {state}: the kernel loads the DKMS-built module "
        "only if it is signed with an enrolled Machine Owner Key, and enrolling one needs "
        "someone at the console at the next boot (MokManager), which an unattended run "
        "cannot do. Fix, before this run: make the key (update-secureboot-policy --new-key), "
        f"import it (mokutil --import {MOK_KEY}), confirm it at the console and reboot; or "
        "disable Secure Boot; or go on with preflight_secure_boot_policy: warn (now "
        f"{policy}; the GPUs then stay without a driver until the key is enrolled).",
        "error" if policy == "fail" else "warning",
    )


def _kernel_abi_fix(stack: Mapping[str, Any], abi: Mapping[str, Any], policy: str) -> str:
    """The way out of a kernel outside the stack's validated ABIs, for the message."""
    target = abi.get("max")
    install = (
        f"set rocm_kernel_pin: true and role rocm installs the stack's kernel {target} (image, "
        f"headers, modules-extra), holds it, pins newer ABIs away, makes it GRUB's default "
        f"and reboots into it before amdgpu-dkms (rocm_reboot_policy)"
        if target
        else "install and boot a kernel in that range"
    )
    return (
        f"Fix: {install}; or boot such a kernel yourself; or, once amdgpu-dkms is seen to "
        f"build on this one, widen kernel_abi in instinct_vllm_stacks_extra; or go on at "
        f"your own risk with preflight_kernel_abi_policy: warn (now {policy})."
    )


def _check_kernel_abi(
    f: _Findings, stack: Mapping[str, Any], host: Mapping[str, Any], policy: str, pin: bool
) -> None:
    """The running kernel against the ABIs the stack is validated on (rocm.kernel_abi)."""
    abi = (stack.get("rocm") or {}).get("kernel_abi")
    if not abi:
        f.add("kernel_abi", True)
        return
    kernel = str(host.get("kernel", ""))
    running = sm.kernel_abi(kernel)
    low, high = sm.kernel_abi(abi["min"]), sm.kernel_abi(abi.get("max"))
    inside = (
        running is not None
        and low is not None
        and running >= low
        and (high is None or running <= high)
    )
    if inside:
        f.add("kernel_abi", True)
        return
    seen = f"{abi['min']} to {abi.get('max') or 'the newest'}"
    where = f"stack '{stack['name']}' rocm.kernel_abi ({seen})"
    source = f"; source: {abi['source']}" if abi.get("source") else ""
    if pin and abi.get("max"):
        f.add(
            "kernel_abi",
            False,
            f"running kernel {kernel} (ansible_facts.kernel) is outside {where}; role rocm "
            f"installs the stack's kernel {abi['max']} and reboots into it before amdgpu-dkms "
            f"(rocm_kernel_pin: true).",
            "warning",
        )
        return
    what = (
        f"has no X.Y.Z-N ABI to compare with {where}" if running is None else f"is outside {where}"
    )
    f.add(
        "kernel_abi",
        False,
        f"running kernel {kernel!r} (ansible_facts.kernel) {what}, the kernel ABIs the "
        f"stack's ROCm is validated on{source}. amdgpu-dkms builds against the running kernel, "
        f"and an Ubuntu ABI update has broken that build before (ROCm issue 3701: 6.8.0-44 "
        f"with ROCm 6.2.0). {_kernel_abi_fix(stack, abi, policy)}",
        "error" if policy == "fail" else "warning",
    )


def sliding_window(config: Mapping[str, Any] | None) -> int | None:
    """The sliding window a model's config.json asks for, as vLLM reads it: ``sliding_window``
    (an int, or a per-layer list whose largest entry counts), ignored when
    ``use_sliding_window`` is false (Qwen2); None when the model has none."""
    if not config:
        return None
    if config.get("use_sliding_window") is False:
        return None
    window = config.get("sliding_window")
    if isinstance(window, list):
        window = max((w for w in window if isinstance(w, int) and w > 0), default=None)
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        return None
    return window


#: vLLM 0.6.6.post1's switch between its ROCm attention kernels (vllm/envs.py).
TRITON_FLASH_ATTN = "VLLM_USE_TRITON_FLASH_ATTN"


def forces_triton(environment: Mapping[str, Any] | None) -> bool:
    """Whether the service's environment turns Triton flash-attention on, as vLLM 0.6.6.post1
    reads the variable (vllm/envs.py: true when it is "true" or "1", any case)."""
    env = environment or {}
    return TRITON_FLASH_ATTN in env and str(env[TRITON_FLASH_ATTN]).lower() in ("true", "1")


def _check_sliding_window(
    f: _Findings,
    stack: Mapping[str, Any],
    window: int | None,
    ck_flash_attention: bool,
    environment: Mapping[str, Any] | None,
    max_model_len: int | None,
) -> None:
    support = (stack["vllm"].get("attention") or {}).get("sliding_window", "supported")
    runs_ck = ck_flash_attention and not forces_triton(environment)
    if support != "requires_ck_flash_attention" or not window or runs_ck:
        f.add("sliding_window", True)
        return
    if max_model_len is not None and max_model_len <= window:
        f.add("sliding_window", True)  # no sequence ever reaches the window
        return
    why = (
        f"vllm_service_environment sets {TRITON_FLASH_ATTN}="
        f"{(environment or {})[TRITON_FLASH_ATTN]}, which runs Triton flash-attention although "
        "CK flash-attention is installed"
        if ck_flash_attention
        else "vllm_source_ck_flash_attention is false"
    )
    f.add(
        "sliding_window",
        False,
        f"the model uses a sliding window of {window} tokens (config.json sliding_window, or "
        f"preflight_model_sliding_window) and stack '{stack['name']}' serves it with an "
        f"attention backend that ignores sliding windows (vllm.attention.sliding_window: "
        f"requires_ck_flash_attention; vLLM 0.6's default Triton flash-attention on ROCm): "
        f"answers past {window} tokens would be silently wrong. Only CK flash-attention applies "
        f"the window, and vLLM runs it only when it is installed and the service's environment "
        f"does not set {TRITON_FLASH_ATTN} to 1 or true; here {why}. Fix: set "
        f"vllm_source_ck_flash_attention: true (builds CK flash-attention) and leave "
        f"{TRITON_FLASH_ATTN} out of vllm_service_environment, or cap the "
        f"context at the window (vllm_service_flags max-model-len <= {window}).",
    )


def evaluate(
    stack: Mapping[str, Any],
    host: Mapping[str, Any],
    gpus: Mapping[str, Any],
    settings: Mapping[str, Any],
    stacks: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Run every check; ``{ok, errors, warnings, checks}``.

    ``host``: ansible_facts (distribution, distribution_version, kernel, architecture,
    memtotal_mb, mounts). ``gpus``: the gpu_facts module's ``gpu_facts``. ``settings``:
    disk_requirements [{path, min_free_gib, purpose}], min_memory_gib, gpu_count (int or None),
    tensor_parallel_size, instances (int, default 1: the vLLM engines per node, each on
    tensor_parallel_size GPUs; > 1 on a GPU stack: instances x tensor_parallel_size must be the
    GPU count), num_attention_heads (int or None), model_architecture (str or None),
    secure_boot (enabled|disabled|unknown), secure_boot_policy (warn|fail|ignore),
    kernel_abi_policy (fail|warn), kernel_pin (bool: role rocm installs and boots the stack's
    kernel, rocm_kernel_pin), sliding_window (int; 0 or None: read from model_config, the
    model's config.json as a mapping), ck_flash_attention (bool), service_environment (the
    service's extra environment, vllm_service_environment), max_model_len (int or None),
    model_disk_path (where the model's copies are written; empty: not checked), model_size_gib
    (0: derived from model_config), model_copies (names of the copies written there).
    ``stacks``: every known stack by name, to name those that would fit (role stack's fact
    instinct_vllm_stack_matrix); None: the stacks of files/stacks.yml.
    """
    f = _Findings()
    heads = settings.get("num_attention_heads") or None
    matrix = sm.all_stacks()[0] if stacks is None else stacks
    _check_os(f, stack, host, matrix)
    _check_cpu(f, stack, host)
    _check_memory(f, host, float(settings.get("min_memory_gib", 0)))
    _check_disks(f, host, list(settings.get("disk_requirements") or []))
    _check_model_disk(f, host, settings)
    expected = settings.get("gpu_count")
    _check_gpus(f, stack, gpus, None if expected in (None, "", -1) else int(expected))
    _check_parallel(
        f,
        stack,
        gpus,
        int(settings.get("tensor_parallel_size", 1)),
        heads,
        int(settings.get("instances", 1)),
    )
    _check_model(f, stack, settings.get("model_architecture") or None, matrix)
    _check_sliding_window(
        f,
        stack,
        int(settings.get("sliding_window") or 0) or sliding_window(settings.get("model_config")),
        bool(settings.get("ck_flash_attention", False)),
        settings.get("service_environment"),
        int(settings.get("max_model_len") or 0) or None,
    )
    _check_kernel_abi(
        f,
        stack,
        host,
        str(settings.get("kernel_abi_policy", "fail")),
        bool(settings.get("kernel_pin", False)),
    )
    _check_driver(
        f,
        stack,
        gpus,
        str(settings.get("secure_boot", "unknown")),
        str(settings.get("secure_boot_policy", "fail")),
    )
    return f.result()
