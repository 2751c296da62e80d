# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Collect AMD Instinct GPU facts: PCI, rocminfo, amd-smi / rocm-smi, amdgpu driver state.

Standard library only. :func:`collect` takes the tool paths (None when a tool is absent) and a
``run`` callable (the module passes ``AnsibleModule.run_command``; tests pass fixtures), so the
logic runs without Ansible. It only reads: commands that print state, files under /sys, /dev,
/etc/modprobe.d and the ROCm prefix.

Before ROCm is installed only PCI (and driver) facts exist; afterwards the agents from
rocminfo and the amd-smi data are merged into the PCI devices by bus address.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible_collections.instinct.vllm.plugins.module_utils._gpu_facts.driver import (
    MOK_KEY,
    SECURE_BOOT_VAR,
    driver_state,
    find_blacklist,
    mok_key_state,
    parse_dkms_status,
    secure_boot_state,
)
from ansible_collections.instinct.vllm.plugins.module_utils._gpu_facts.pci import (
    parse_lspci,
    short_bdf,
)
from ansible_collections.instinct.vllm.plugins.module_utils._gpu_facts.rocm import (
    PARTITION_ARGS,
    parse_amd_smi_static,
    parse_amd_smi_version,
    parse_rocm_smi,
    parse_rocm_smi_partitions,
    parse_rocminfo,
)

Runner = Callable[[list[str]], tuple[int, str, str]]

SOURCES: tuple[str, ...] = ("pci", "rocminfo", "amd_smi", "rocm_smi", "driver")
TOOLS: dict[str, str] = {
    "lspci": "lspci",
    "rocminfo": "rocminfo",
    "amd_smi": "amd-smi",
    "rocm_smi": "rocm-smi",
    "lsmod": "lsmod",
    "dkms": "dkms",
    "mokutil": "mokutil",
}
LSPCI_ARGS: tuple[str, ...] = ("-D", "-nn", "-k", "-d", "1002:")


def _gpu_from_pci(dev: dict[str, Any]) -> dict[str, Any]:
    return {
        "bdf": dev["bdf"],
        "product": dev["product"],
        "device_id": dev["device_id"],
        "arch": dev["arch"],
        "family": dev["family"],
        "vf": dev["vf"],
        "marketing_name": None,
        "compute_units": None,
        "vram_gib": None,
        "uuid": None,
        "node": None,
        "driver_in_use": dev["driver_in_use"],
        "partitions": 0,
        "sources": ["pci"],
    }


def _empty_gpu(bdf: str | None) -> dict[str, Any]:
    gpu = _gpu_from_pci(
        {
            "bdf": bdf,
            "product": None,
            "device_id": None,
            "arch": None,
            "family": None,
            "vf": False,
            "driver_in_use": None,
        }
    )
    gpu["sources"] = []
    return gpu


def _fill(gpu: dict[str, Any], key: str, value: Any, override: bool = False) -> None:
    if value is not None and (override or gpu.get(key) is None):
        gpu[key] = value


_AGENT_FIELDS = (
    ("marketing_name", "marketing_name"),
    ("compute_units", "compute_units"),
    ("vram_gib", "vram_gib"),
    ("uuid", "uuid"),
    ("node", "node"),
    ("device_id", "chip_id"),
    ("product", "product"),
)
_SMI_FIELDS = (
    ("arch", "arch"),
    ("marketing_name", "market_name"),
    ("compute_units", "compute_units"),
    ("vram_gib", "vram_gib"),
    ("device_id", "device_id"),
    ("product", "product"),
)


def _add_source(gpu: dict[str, Any], source: str) -> None:
    if source not in gpu["sources"]:
        gpu["sources"].append(source)


def _merge_agents(
    gpus: dict[str, dict[str, Any]], agents: list[dict[str, Any]], have_pci: bool
) -> list[dict[str, Any]]:
    """rocminfo agents into gpus (by bus address); returns the agents PCI did not list."""
    unmatched: list[dict[str, Any]] = []
    for index, agent in enumerate(agents):
        key = agent.get("bdf") or f"agent-{index}"
        gpu = gpus.get(key)
        if gpu is None:
            if have_pci:
                unmatched.append(agent)
                continue
            gpu = gpus[key] = _empty_gpu(f"0000:{agent['bdf']}" if agent.get("bdf") else None)
        gpu["partitions"] += 1
        _add_source(gpu, "rocminfo")
        _fill(gpu, "arch", agent.get("arch"), override=True)
        for field, key_in_agent in _AGENT_FIELDS:
            _fill(gpu, field, agent.get(key_in_agent))
    return unmatched


def _merge_smi(gpus: dict[str, dict[str, Any]], smi: list[dict[str, Any]], have_pci: bool) -> None:
    """amd-smi entries into gpus (by bus address); without PCI data they add GPUs."""
    for entry in smi:
        key = short_bdf(entry["bdf"]) if entry.get("bdf") else None
        gpu = gpus.get(key) if key else None
        if gpu is None:
            if have_pci or key is None:
                continue
            gpu = gpus[key] = _empty_gpu(entry["bdf"])
        _add_source(gpu, "amd_smi")
        for field, key_in_entry in _SMI_FIELDS:
            _fill(gpu, field, entry.get(key_in_entry))


def merge_gpus(
    pci: list[dict[str, Any]],
    agents: list[dict[str, Any]],
    smi: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One entry per GPU (by bus address); returns ``(gpus, unmatched_agents)``.

    With PCI data, PCI devices are the GPUs and agents/amd-smi entries are matched to them; an
    agent on an address PCI did not list is returned as unmatched. Without PCI data (tool
    missing or no AMD device visible, e.g. in a container), the agents and amd-smi entries
    define the GPUs. Several agents on one address (compute partitions) count as partitions.
    """
    gpus: dict[str, dict[str, Any]] = {}
    for dev in pci:
        gpus.setdefault(short_bdf(dev["bdf"]), _gpu_from_pci(dev))
    have_pci = bool(gpus)
    unmatched = _merge_agents(gpus, agents, have_pci)
    _merge_smi(gpus, smi, have_pci)
    return list(gpus.values()), unmatched


def _run(run: Runner, argv: list[str]) -> tuple[int, str]:
    """Run a read-only command; stdout and stderr together (tools print errors on either)."""
    try:
        rc, out, err = run(argv)
    except OSError as exc:
        return 127, str(exc)
    joined = "\n".join(part for part in (out, err) if part)
    return rc, joined


def _output(run: Runner, argv: list[str]) -> str:
    """Like :func:`_run` for callers that judge the text, not the exit code."""
    return _run(run, argv)[1]


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


_NOT_INSTALLED: dict[str, Any] = {"tool": None, "status": "not_installed", "error": None}


@dataclass(frozen=True)
class HostPaths:
    """Where :func:`collect` reads host state (tests point these at fake trees)."""

    sys_module_dir: str = "/sys/module"
    modprobe_dir: str = "/etc/modprobe.d"
    dev_dir: str = "/dev"
    rocm_path: str = "/opt/rocm"
    efivars_dir: str = "/sys/firmware/efi/efivars"
    mok_key: str = MOK_KEY


Items = list[dict[str, Any]]


def _skipped(tool: str | None, **fields: Any) -> dict[str, Any]:
    """A tool's section before the tool runs: skipped, no error, its fields empty."""
    return {"tool": tool, "status": "skipped", "error": None, **fields}


def _runnable(section: dict[str, Any], tool: str | None, wanted: bool) -> bool:
    """Whether to run the tool; a wanted tool that is missing marks the section not_installed."""
    if wanted and not tool:
        section.update(_NOT_INSTALLED)
    return bool(wanted and tool)


def collect_pci(tool: str | None, run: Runner, wanted: bool = True) -> tuple[dict[str, Any], Items]:
    """lspci: the AMD PCI functions; ``(section, devices)``."""
    pci: dict[str, Any] = {"tool": tool, "status": "skipped", "count": 0, "error": None}
    if not wanted:
        return pci, []
    if not tool:
        pci.update(status="not_installed", error="lspci not found (install pciutils)")
        return pci, []
    rc, out = _run(run, [str(tool), *LSPCI_ARGS])
    if rc != 0:
        pci.update(status="error", error=f"lspci failed (rc={rc}): {out.strip()[:300]}")
        return pci, []
    devices = parse_lspci(out)
    pci.update(status="ok", count=len(devices))
    return pci, devices


def collect_rocminfo(
    tool: str | None, run: Runner, wanted: bool = True
) -> tuple[dict[str, Any], Items]:
    """rocminfo: the HSA agents; ``(section, gpu_agents)``."""
    section = _skipped(
        tool, rock_loaded=None, rock_version=None, gpu_agent_count=0, cpu_agent_count=0
    )
    if not _runnable(section, tool, wanted):
        return section, []
    parsed = parse_rocminfo(_output(run, [str(tool)]))
    section.update(
        status=parsed["status"],
        error=parsed["error"],
        rock_loaded=parsed["rock_loaded"],
        rock_version=parsed["rock_version"],
        gpu_agent_count=len(parsed["gpu_agents"]),
        cpu_agent_count=len(parsed["agents"]) - len(parsed["gpu_agents"]),
    )
    return section, parsed["gpu_agents"]


def collect_amd_smi(
    tool: str | None, run: Runner, wanted: bool = True
) -> tuple[dict[str, Any], Items]:
    """amd-smi static and version: ``(section, gpus)``."""
    section = _skipped(tool, gpu_count=0, rocm_version=None, amdgpu_version=None, version=None)
    if not _runnable(section, tool, wanted):
        return section, []
    parsed = parse_amd_smi_static(_output(run, [str(tool), "static", "--json"]))
    version = parse_amd_smi_version(_output(run, [str(tool), "version", "--json"]))
    section.update(
        status=parsed["status"],
        error=parsed["error"],
        gpu_count=len(parsed["gpus"]),
        rocm_version=version["rocm_version"],
        amdgpu_version=version["amdgpu_version"],
        version=version["tool_version"],
    )
    return section, parsed["gpus"]


def collect_rocm_smi(tool: str | None, run: Runner, wanted: bool = True) -> dict[str, Any]:
    """rocm-smi (the caller asks only when amd-smi gave nothing): its section."""
    section = _skipped(tool, gpu_count=0, ids=[])
    if not _runnable(section, tool, wanted):
        return section
    parsed = parse_rocm_smi(_output(run, [str(tool)]))
    section.update(
        status=parsed["status"],
        error=parsed["error"],
        gpu_count=len(parsed["gpus"]),
        ids=[g["id"] for g in parsed["gpus"]],
    )
    return section


def collect_partition_modes(tool: str | None, run: Runner, wanted: bool = True) -> dict[str, Any]:
    """rocm-smi's compute and memory partition modes, one entry per device it lists."""
    section = _skipped(tool, gpus=[])
    if not _runnable(section, tool, wanted):
        return section
    rc, out = _run(run, [str(tool), *PARTITION_ARGS])
    parsed = parse_rocm_smi_partitions(out)
    if parsed["status"] == "unparsable" and rc != 0:
        parsed["error"] = (
            f"rocm-smi {' '.join(PARTITION_ARGS)} failed (rc={rc}): {out.strip()[:300]}"
        )
        parsed["status"] = "error"
    section.update(status=parsed["status"], error=parsed["error"], gpus=parsed["gpus"])
    return section


def _ok_output(run: Runner, tool: str | None, *args: str) -> str | None:
    """The output of ``tool args`` when it exists and exits 0, else None."""
    if not tool:
        return None
    rc, out = _run(run, [str(tool), *args])
    return out if rc == 0 else None


def collect_driver(
    tools: dict[str, str | None],
    run: Runner,
    paths: HostPaths,
    amdgpu_version: str | None,
    wanted: bool = True,
) -> dict[str, Any]:
    """amdgpu driver state: module, DKMS, blacklist, Secure Boot."""
    driver: dict[str, Any] = {
        "loaded": None,
        "kind": None,
        "version": None,
        "initstate": None,
        "source": None,
        "dkms_helpers": [],
        "dkms": [],
        "blacklisted_in": [],
        "secure_boot": None,
        "mok_key": None,
    }
    if not wanted:
        return driver
    lsmod_text = _ok_output(run, tools.get("lsmod"))
    driver.update(driver_state(paths.sys_module_dir, lsmod_text, amdgpu_version))
    if tools.get("dkms"):
        dkms_text = _ok_output(run, tools.get("dkms"), "status", "-m", "amdgpu")
        driver["dkms"] = parse_dkms_status(dkms_text) if dkms_text is not None else []
    driver["blacklisted_in"] = find_blacklist(paths.modprobe_dir)
    mokutil_text = None
    if tools.get("mokutil") and not (Path(paths.efivars_dir) / SECURE_BOOT_VAR).exists():
        mokutil_text = _output(run, [str(tools["mokutil"]), "--sb-state"])
    driver["secure_boot"] = secure_boot_state(paths.efivars_dir, mokutil_text)
    if driver["secure_boot"] == "enabled":
        key = Path(paths.mok_key)
        test = None
        if tools.get("mokutil") and key.is_file():
            test = _output(run, [str(tools["mokutil"]), "--test-key", str(key)])
        driver["mok_key"] = mok_key_state(key.is_file(), test)
    return driver


def _blacklist_problem(driver: dict[str, Any]) -> str | None:
    if not driver["blacklisted_in"]:
        return None
    return (
        "amdgpu is blacklisted in "
        + ", ".join(driver["blacklisted_in"])
        + ": remove the blacklist (ROCm runs on the amdgpu driver; "
        "blacklisting it disables the GPUs)"
    )


def _unmatched_problem(unmatched: Items) -> str | None:
    if not unmatched:
        return None
    return (
        f"rocminfo lists {len(unmatched)} GPU agent(s) on bus addresses lspci did not show: "
        + ", ".join(str(a.get("bdf")) for a in unmatched)
    )


def _kfd(dev_dir: str) -> dict[str, bool]:
    kfd = Path(dev_dir) / "kfd"
    return {
        "present": kfd.exists(),
        "accessible": kfd.exists() and os.access(kfd, os.R_OK | os.W_OK),
    }


def _gpu_summary(gpus: Items) -> dict[str, Any]:
    return {
        "gpus": gpus,
        "count": len(gpus),
        "archs": sorted({g["arch"] for g in gpus if g["arch"]}),
        "products": sorted({g["product"] for g in gpus if g["product"]}),
        "unknown_arch_count": sum(1 for g in gpus if not g["arch"]),
    }


def collect(
    tools: dict[str, str | None],
    run: Runner,
    sources: Iterable[str] = SOURCES,
    sys_module_dir: str = "/sys/module",
    modprobe_dir: str = "/etc/modprobe.d",
    dev_dir: str = "/dev",
    rocm_path: str = "/opt/rocm",
    efivars_dir: str = "/sys/firmware/efi/efivars",
) -> dict[str, Any]:
    """All GPU facts. ``tools`` maps the keys of :data:`TOOLS` to a path or None."""
    paths = HostPaths(sys_module_dir, modprobe_dir, dev_dir, rocm_path, efivars_dir)
    wanted = set(sources)
    pci, pci_devices = collect_pci(tools.get("lspci"), run, "pci" in wanted)
    rocminfo, agents = collect_rocminfo(tools.get("rocminfo"), run, "rocminfo" in wanted)
    amd_smi, smi_gpus = collect_amd_smi(tools.get("amd_smi"), run, "amd_smi" in wanted)
    rocm_smi = collect_rocm_smi(
        tools.get("rocm_smi"), run, "rocm_smi" in wanted and amd_smi["status"] != "ok"
    )
    partition_modes = collect_partition_modes(tools.get("rocm_smi"), run, "rocm_smi" in wanted)
    driver = collect_driver(tools, run, paths, amd_smi["amdgpu_version"], "driver" in wanted)
    info_version = _read(Path(paths.rocm_path) / ".info" / "version")
    gpus, unmatched = merge_gpus(pci_devices, agents, smi_gpus)
    problems = [s["error"] for s in (pci, rocminfo, amd_smi, rocm_smi) if s["error"]]
    problems += [p for p in (_blacklist_problem(driver), _unmatched_problem(unmatched)) if p]
    return {
        "pci": pci,
        "rocminfo": rocminfo,
        "amd_smi": amd_smi,
        "rocm_smi": rocm_smi,
        "partition_modes": partition_modes,
        "driver": driver,
        "kfd": _kfd(paths.dev_dir),
        "rocm_version": amd_smi["rocm_version"] or (info_version.strip() if info_version else None),
        "rocm_installed": bool(tools.get("rocminfo") or tools.get("amd_smi") or info_version),
        **_gpu_summary(gpus),
        "problems": problems,
    }
