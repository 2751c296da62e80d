# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsers for the ROCm tools: ``rocminfo``, ``amd-smi static/version --json``, ``rocm-smi``.

Standard library only. Every parser accepts whatever the tool printed (stdout and stderr
together), including its failure messages, and returns a ``status`` plus facts instead of
raising: ``ok``, ``rock_not_loaded``, ``kfd_error``, ``permission_denied``, ``no_gpus``,
``unparsable``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ansible_collections.instinct.vllm.plugins.module_utils._gpu_facts.pci import (
    lookup_device,
    normalize_bdf,
    strip_ansi,
)

_KV = re.compile(r"^(?P<indent>\s*)(?P<key>[^:]+?):\s*(?P<value>.*?)\s*$")
_AGENT = re.compile(r"^Agent\s+(\d+)\s*$")
_POOL = re.compile(r"^\s+Pool\s+(\d+)\s*$")
_NUM = re.compile(r"^(?P<num>\d+)(?:\(0x(?P<hex>[0-9a-fA-F]+)\))?\s*(?P<unit>\w+)?")
_ROCK_VERSION = re.compile(r"ROCk module version (?P<version>\S+) is loaded")
_GFX = re.compile(r"^gfx[0-9a-f]+$")

ROCK_NOT_LOADED_HINT = (
    "the amdgpu kernel module is not loaded (install amdgpu-dkms or linux-modules-extra for the "
    "running kernel, reboot, and check that amdgpu is not blacklisted in /etc/modprobe.d)"
)


def _num(value: str) -> int | None:
    match = _NUM.match(value.strip())
    return int(match.group("num")) if match else None


def _hex_id(value: str) -> str | None:
    match = _NUM.match(value.strip())
    if not match:
        return None
    if match.group("hex"):
        return match.group("hex").lower().zfill(4)
    return f"{int(match.group('num')):04x}"


def bdfid_to_bdf(bdfid: int | None) -> str | None:
    """rocminfo's BDFID (bus << 8 | device << 3 | function) -> ``bb:dd.f``."""
    if bdfid is None or bdfid <= 0:
        return None
    return f"{(bdfid >> 8) & 0xFF:02x}:{(bdfid >> 3) & 0x1F:02x}.{bdfid & 0x7}"


def _kib_to_gib(kib: int | None) -> float | None:
    return None if kib is None else round(kib / 1024 / 1024, 1)


def _finish_agent(agent: dict[str, Any]) -> dict[str, Any]:
    fields = agent.pop("_fields")
    pools = agent.pop("_pools")
    agent["name"] = fields.get("Name")
    agent["marketing_name"] = fields.get("Marketing Name")
    agent["vendor"] = fields.get("Vendor Name")
    agent["device_type"] = fields.get("Device Type")
    agent["uuid"] = fields.get("Uuid")
    agent["node"] = _num(fields.get("Node", ""))
    agent["compute_units"] = _num(fields.get("Compute Unit", ""))
    agent["chip_id"] = _hex_id(fields.get("Chip ID", "")) if agent["device_type"] == "GPU" else None
    bdfid = _num(fields.get("BDFID", ""))
    agent["bdf"] = bdfid_to_bdf(bdfid) if agent["device_type"] == "GPU" else None
    vram_kib = None
    for pool in pools:
        if "GLOBAL" in pool.get("Segment", "") and "COARSE GRAINED" in pool.get("Segment", ""):
            vram_kib = _num(pool.get("Size", ""))
            break
    agent["vram_gib"] = _kib_to_gib(vram_kib) if agent["device_type"] == "GPU" else None
    name = agent["name"] or ""
    agent["arch"] = name if _GFX.match(name) else None
    known = lookup_device(agent["chip_id"])
    agent["product"] = known["product"] if known else None
    return agent


_SECTIONS = {"Pool Info": "pools", "ISA Info": "isa", "Cache Info": "cache"}
_NO_GPU_AGENT = (
    "rocminfo: no GPU agent (only CPU agents): the amdgpu driver is loaded but no GPU "
    "was initialised (see dmesg for amdgpu errors, e.g. firmware loading)"
)
_KFD_UNUSABLE = (
    "the KFD device is unusable here (inside a container: pass /dev/kfd and "
    "/dev/dri with --device; on a host: the amdgpu driver failed to initialise, see dmesg)"
)


def _rock_state(text: str) -> tuple[bool | None, str | None]:
    """``(rock_loaded, rock_version)`` from the ROCk module lines, if any."""
    version = _ROCK_VERSION.search(text)
    loaded = True if version or "ROCk module is loaded" in text else None
    if "ROCk module is NOT loaded" in text:
        loaded = False
    return loaded, version.group("version") if version else None


def _failure(lines: list[str]) -> dict[str, str] | None:
    """The first line saying rocminfo could not reach the GPUs: {status, error[, kfd_reason]}."""
    for line in lines:
        if "Unable to open /dev/kfd" in line:
            reason = line.split(":", 1)[1].strip() if ":" in line else line.strip()
            hint = (
                "add the user to the 'render' and 'video' groups"
                if "Permission denied" in line
                else _KFD_UNUSABLE
            )
            error = f"rocminfo: /dev/kfd: {reason}: {hint}"
            return {"status": "kfd_error", "error": error, "kfd_reason": reason}
        if "HSA_STATUS_ERROR" in line or line.startswith("hsa api call failure"):
            return {"status": "hsa_error", "error": f"rocminfo: {line.strip()}"}
    return None


class _AgentReader:
    """rocminfo's ``Agent N`` blocks, fed line by line; :meth:`agents` finishes them."""

    def __init__(self) -> None:
        self._done: list[dict[str, Any]] = []
        self._agent: dict[str, Any] | None = None
        self._section: str | None = None
        self._pool: dict[str, str] | None = None

    def feed(self, line: str) -> None:
        stripped = line.strip()
        header = _AGENT.match(stripped)
        if header and not line.startswith(" "):
            self._finish()
            self._agent = {"index": int(header.group(1)), "_fields": {}, "_pools": [], "isas": []}
            self._section = None
            return
        if self._agent is None or not stripped or stripped.startswith("***"):
            return
        if _POOL.match(line):
            self._pool = {}
            self._agent["_pools"].append(self._pool)
            return
        kv = _KV.match(line)
        if kv:
            key, value = kv.group("key").strip(), kv.group("value")
            self._field(self._agent, len(kv.group("indent")), key, value)

    def _field(self, agent: dict[str, Any], indent: int, key: str, value: str) -> None:
        if indent <= 2:
            self._section = _SECTIONS.get(key)
            self._pool = None
            agent["_fields"].setdefault(key, value)
        elif self._section == "pools" and self._pool is not None:
            self._pool.setdefault(key, value)
        elif self._section == "isa" and key == "Name" and value.startswith("amdgcn"):
            agent["isas"].append(value)

    def _finish(self) -> None:
        if self._agent is not None:
            self._done.append(_finish_agent(self._agent))
            self._agent = None

    def agents(self) -> list[dict[str, Any]]:
        self._finish()
        return self._done


def _read_agents(lines: list[str]) -> list[dict[str, Any]]:
    reader = _AgentReader()
    for line in lines:
        reader.feed(line)
    return reader.agents()


def parse_rocminfo(text: str) -> dict[str, Any]:
    """Agents and status from ``rocminfo`` output (stdout + stderr).

    Returns ``{status, rock_loaded, rock_version, error, agents, gpu_agents}``; each agent has
    name, arch (gfxNNN for GPUs), marketing_name, device_type, compute_units, chip_id, bdf,
    vram_gib (the coarse-grained global pool), isas.
    """
    text = strip_ansi(text or "")
    lines = text.splitlines()
    rock_loaded, rock_version = _rock_state(text)
    result: dict[str, Any] = {
        "status": "unparsable",
        "rock_loaded": rock_loaded,
        "rock_version": rock_version,
        "error": None,
        "agents": [],
        "gpu_agents": [],
    }
    if rock_loaded is False:
        error = f"rocminfo: ROCk module is NOT loaded: {ROCK_NOT_LOADED_HINT}"
        return {**result, "status": "rock_not_loaded", "error": error}
    failure = _failure(lines)
    if failure:
        return {**result, **failure}
    agents = _read_agents(lines)
    gpu_agents = [a for a in agents if a["device_type"] == "GPU"]
    result.update(agents=agents, gpu_agents=gpu_agents)
    if agents:
        result["status"] = "ok" if gpu_agents else "no_gpus"
        result["error"] = None if gpu_agents else _NO_GPU_AGENT
    elif rock_loaded is None:
        result["error"] = "rocminfo: output not recognised"
    return result


# --- amd-smi -----------------------------------------------------------------------------------


def _na(value: Any) -> Any:
    return None if value in ("N/A", "", None) else value


def _json_start(text: str) -> int:
    """Index of the first line that opens the JSON document (a banner may precede it)."""
    offset = 0
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith(("{", "[")):
            return offset + (len(line) - len(line.lstrip()))
        offset += len(line)
    return -1


def _banner_problem(banner: str) -> tuple[str | None, str | None]:
    if "Permission denied" in banner or "Permission needed" in banner:
        return "permission_denied", (
            "amd-smi: permission denied on /dev/kfd or /dev/dri/renderD*: add the user to the "
            "'render' and 'video' groups (and log in again), or run as root"
        )
    return None, None


def _mb_to_gib(size: Any) -> float | None:
    if isinstance(size, dict):
        value, unit = _na(size.get("value")), str(size.get("unit", "MB"))
    else:
        value, unit = _na(size), "MB"
    if not isinstance(value, (int, float)):
        return None
    factor = {"B": 1 / 1024**3, "KB": 1 / 1024**2, "MB": 1 / 1024, "GB": 1.0}.get(
        unit.upper(), 1 / 1024
    )
    return round(value * factor, 1)


def parse_amd_smi_static(text: str) -> dict[str, Any]:
    """``amd-smi static --json``: per-GPU asic/bus/driver/board/vram, and the permission banner.

    Accepts the ``{"gpu_data": [...]}`` layout (amd-smi 26.x) and a bare list (older).
    """
    text = strip_ansi(text or "")
    start = _json_start(text)
    banner = text[:start] if start >= 0 else text
    status, error = _banner_problem(banner)
    result: dict[str, Any] = {"status": status or "unparsable", "error": error, "gpus": []}
    if start < 0:
        result["error"] = error or f"amd-smi: no JSON in output: {banner.strip()[:200]}"
        return result
    try:
        data = json.loads(text[start:])
    except ValueError as exc:
        result["error"] = error or f"amd-smi: invalid JSON ({exc})"
        return result
    items = data.get("gpu_data", []) if isinstance(data, dict) else data
    if not isinstance(items, list):
        result["error"] = error or "amd-smi: unexpected JSON layout"
        return result
    for item in items:
        if not isinstance(item, dict):
            continue
        asic = item.get("asic") or {}
        bus = item.get("bus") or {}
        driver = item.get("driver") or {}
        board = item.get("board") or {}
        vram = item.get("vram") or {}
        device_id = _na(asic.get("device_id"))
        device_id = str(device_id).lower().removeprefix("0x").zfill(4) if device_id else None
        known = lookup_device(device_id)
        cus = _na(asic.get("num_compute_units"))
        bdf = _na(bus.get("bdf"))
        result["gpus"].append(
            {
                "index": item.get("gpu"),
                "bdf": normalize_bdf(bdf) if bdf else None,
                "market_name": _na(asic.get("market_name")),
                "device_id": device_id,
                "arch": _na(asic.get("target_graphics_version")),
                "product": known["product"] if known else None,
                "compute_units": cus if isinstance(cus, int) else None,
                "vram_gib": _mb_to_gib(vram.get("size")),
                "driver_name": _na(driver.get("name")),
                "driver_version": _na(driver.get("version")),
                "board_product_name": _na(board.get("product_name")),
            }
        )
    if status is None:
        result["status"] = "ok" if result["gpus"] else "no_gpus"
    return result


_VERSION_LIKE = re.compile(r"^\d+\.\d+")


def parse_amd_smi_version(text: str) -> dict[str, Any]:
    """``amd-smi version --json`` (or its text form): tool, ROCm and amdgpu versions.

    An amdgpu version that is not a version number (``AMDSMI_STATUS_FILE_ERROR ...`` for a
    non-root user, or the kernel banner amd-smi falls back to on the in-box driver) is
    reported as None with the raw text in ``amdgpu_version_raw``.
    """
    text = strip_ansi(text or "")
    fields: dict[str, Any] = {}
    start = _json_start(text)
    if start >= 0:
        try:
            data = json.loads(text[start:])
            entry = data[0] if isinstance(data, list) and data else data
            if isinstance(entry, dict):
                fields = {
                    "tool_version": entry.get("version"),
                    "library_version": entry.get("amdsmi_library_version"),
                    "rocm_version": entry.get("rocm_version"),
                    "amdgpu_version": entry.get("amdgpu_version"),
                }
        except ValueError:
            fields = {}
    if not fields:
        for part in text.replace("\n", " | ").split(" | "):
            if ":" not in part:
                continue
            key, value = (s.strip() for s in part.split(":", 1))
            key = key.lower()
            if key == "amdsmi tool":
                fields["tool_version"] = value
            elif key == "amdsmi library version":
                fields["library_version"] = value
            elif key == "rocm version":
                fields["rocm_version"] = value
            elif key == "amdgpu version":
                fields["amdgpu_version"] = value
    raw = fields.get("amdgpu_version")
    amdgpu = raw if isinstance(raw, str) and _VERSION_LIKE.match(raw) else None
    return {
        "status": "ok" if fields else "unparsable",
        "tool_version": _na(fields.get("tool_version")),
        "library_version": _na(fields.get("library_version")),
        "rocm_version": _na(fields.get("rocm_version")),
        "amdgpu_version": amdgpu,
        "amdgpu_version_raw": None if amdgpu else _na(raw),
    }


# --- rocm-smi ----------------------------------------------------------------------------------

_SMI_ROW = re.compile(r"^(?P<index>\d+)\s+(?P<rest>.*\S)\s*$")
_SMI_DID = re.compile(r"0x(?P<did>[0-9a-fA-F]{4})")
_SMI_PRODUCT = re.compile(r"^GPU\[(?P<index>\d+)\]\s*:\s*(?P<key>[^:]+?):\s*(?P<value>.*?)\s*$")


def parse_rocm_smi(text: str) -> dict[str, Any]:
    """The concise ``rocm-smi`` table: GPU count and IDs (both table layouts).

    The newer layout ("Node IDs (DID, GUID)") shows the PCI device ID; the older one
    ("[Model : Revision]") shows the card model (subsystem ID), which equals the device ID on
    MI300X but not on older cards (MI210: 0x0c34). ``id_kind`` says which one ``id`` is.
    """
    text = strip_ansi(text or "")
    result: dict[str, Any] = {"status": "unparsable", "error": None, "gpus": []}
    if "No AMD GPUs specified" in text:
        result["status"] = "no_gpus"
        result["error"] = (
            "rocm-smi: no AMD GPUs (the amdgpu driver did not initialise any GPU; see dmesg)"
        )
        return result
    if "Concise Info" not in text:
        result["error"] = f"rocm-smi: concise table not found: {text.strip()[:200]}"
        return result
    id_kind = "did" if "DID" in text else "model"
    in_table = False
    for line in text.splitlines():
        if "Concise Info" in line:
            in_table = True
            continue
        if "End of ROCm SMI Log" in line:
            break
        row = _SMI_ROW.match(line) if in_table else None
        if not row:
            continue
        found = _SMI_DID.search(row.group("rest"))
        ident = found.group("did").lower() if found else None
        known = lookup_device(ident)
        result["gpus"].append(
            {
                "index": int(row.group("index")),
                "id": ident,
                "id_kind": id_kind,
                "product": known["product"] if known else None,
                "arch": known["arch"] if known else None,
            }
        )
    result["status"] = "ok" if result["gpus"] else "no_gpus"
    return result


def parse_rocm_smi_productname(text: str) -> dict[int, dict[str, str]]:
    """``rocm-smi --showproductname``: ``{gpu index: {"Card Series": ..., "GFX Version": ...}}``."""
    cards: dict[int, dict[str, str]] = {}
    for line in strip_ansi(text or "").splitlines():
        match = _SMI_PRODUCT.match(line.strip())
        if match:
            cards.setdefault(int(match.group("index")), {})[match.group("key").strip()] = (
                match.group("value")
            )
    return cards


# --- rocm-smi --showcomputepartition --showmemorypartition ------------------------------------

# The modes ROCm 6.2.1's rocm-smi knows (ROCm/rocm_smi_lib at tag rocm-6.2.1,
# python_smi_tools/rsmiBindings.py: compute_partition_type_l and rsmi_memory_partition_type_t).
COMPUTE_PARTITIONS: tuple[str, ...] = ("SPX", "DPX", "TPX", "QPX", "CPX")
MEMORY_PARTITIONS: tuple[str, ...] = ("NPS1", "NPS2", "NPS4", "NPS8")
PARTITION_ARGS: tuple[str, ...] = ("--showcomputepartition", "--showmemorypartition")

_SMI_LINE = re.compile(r"^GPU\[(?P<index>\d+)\]\s*:\s*(?P<text>.*?)\s*$")
_PARTITION_VALUE = re.compile(r"^(?P<kind>Compute|Memory) Partition:\s*(?P<mode>\S+)$")
_SECTIONS_SMI = {"Current Compute Partition": "compute", "Current Memory Partition": "memory"}


def _partition_section(line: str, current: str | None) -> str | None:
    """The section a spacer line opens (``compute``/``memory``); other spacers close it."""
    if not line.startswith("="):
        return current
    return next((kind for title, kind in _SECTIONS_SMI.items() if title in line), None)


def parse_rocm_smi_partitions(text: str) -> dict[str, Any]:
    """``rocm-smi --showcomputepartition --showmemorypartition``: each device's two modes.

    rocm-smi prints ``GPU[i] : Compute Partition: SPX`` and ``GPU[i] : Memory Partition: NPS1``
    (``printLog`` in rocm_smi.py), or ``Not supported on the given system`` / an error line for
    a device that cannot say (GPUs without partitions; secondary partitions on some releases).
    Returns ``{status, error, gpus: [{index, compute, memory, notes}]}``; a mode that could not
    be read is None and its line is kept in ``notes``.
    """
    text = strip_ansi(text or "")
    result: dict[str, Any] = {"status": "unparsable", "error": None, "gpus": []}
    if "No AMD GPUs specified" in text:
        result.update(status="no_gpus", error="rocm-smi: no AMD GPUs (see dmesg for amdgpu)")
        return result
    gpus: dict[int, dict[str, Any]] = {}
    section: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        section = _partition_section(line, section)
        match = _SMI_LINE.match(line)
        if not match or section is None:
            continue
        gpu = gpus.setdefault(
            int(match.group("index")),
            {"index": int(match.group("index")), "compute": None, "memory": None, "notes": []},
        )
        value = _PARTITION_VALUE.match(match.group("text"))
        if value and value.group("kind").lower() == section:
            mode = value.group("mode").upper()
            gpu[section] = None if mode == "N/A" else mode
        else:
            gpu["notes"].append(f"{section}: {match.group('text')}")
    result["gpus"] = [gpus[i] for i in sorted(gpus)]
    if result["gpus"]:
        result["status"] = "ok"
    else:
        result["error"] = f"rocm-smi: no partition lines: {text.strip()[:200]}"
    return result
