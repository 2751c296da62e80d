# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One node's collected evidence, read back (from a directory or an archive) and the facts
the failure classes reason about. Reuses the gpu_facts parsers. Standard library only."""

from __future__ import annotations

import json
import re
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible_collections.instinct.vllm.plugins.module_utils._diagnose.collect import INDEX
from ansible_collections.instinct.vllm.plugins.module_utils.gpu_facts import (
    parse_amd_smi_static,
    parse_dkms_status,
    parse_lsmod,
    parse_rocminfo,
)

_GFX = re.compile(r"\bgfx[0-9a-f]{3,4}\b")


@dataclass
class Item:
    status: str
    text: str = ""


@dataclass
class Evidence:
    """Collector name -> Item; ``meta`` from the index (host, settings)."""

    items: dict[str, Item] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_texts(
        cls,
        texts: Mapping[str, str],
        statuses: Mapping[str, str] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> Evidence:
        statuses = statuses or {}
        return cls({k: Item(statuses.get(k, "ok"), v) for k, v in texts.items()}, dict(meta or {}))

    @classmethod
    def from_directory(cls, directory: str | Path) -> Evidence:
        root = Path(directory)
        index = json.loads((root / INDEX).read_text(encoding="utf-8"))
        items = {}
        for entry in index.get("collectors", []):
            path = root / entry["file"]
            text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
            items[entry["name"]] = Item(entry["status"], text)
        return cls(items, index.get("meta", {}))

    @classmethod
    def from_members(cls, members: Mapping[str, str]) -> Evidence:
        """From ``{file name: text}`` (one node's files out of an archive)."""
        index = json.loads(members[INDEX])
        items = {
            e["name"]: Item(e["status"], members.get(e["file"], ""))
            for e in index.get("collectors", [])
        }
        return cls(items, index.get("meta", {}))

    def text(self, name: str) -> str:
        item = self.items.get(name)
        return item.text if item else ""

    def status(self, name: str) -> str:
        item = self.items.get(name)
        return item.status if item else "absent"

    def ok(self, name: str) -> bool:
        return self.status(name) == "ok"

    def all_logs(self) -> str:
        """Journal, kernel log and build log: where failure messages appear."""
        return "\n".join(
            self.text(n)
            for n in (
                "unit_journal",
                "kernel_log",
                "modules_load_journal",
                "build_log_tail",
                "dkms_make_log",
                "versions",
                "rocminfo",
            )
        )


def read_archive_members(archive: str | Path) -> dict[str, dict[str, str]]:
    """A node archive (or the combined one) -> {top directory: {file: text}}."""
    nodes: dict[str, dict[str, str]] = {}
    with tarfile.open(archive, "r:*") as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            parts = member.name.split("/")
            if len(parts) < 2:
                continue
            handle = tar.extractfile(member)
            data = handle.read().decode("utf-8", errors="replace") if handle else ""
            nodes.setdefault(parts[0], {})["/".join(parts[1:])] = data
    return nodes


def gfx_agents(ev: Evidence) -> list[str]:
    """gfx targets of the GPU agents rocminfo lists (sorted, unique)."""
    if not ev.ok("rocminfo"):
        return []
    parsed = parse_rocminfo(ev.text("rocminfo"))
    return sorted({a["arch"] for a in parsed.get("gpu_agents", []) if a.get("arch")})


def rocminfo_state(ev: Evidence) -> dict[str, Any]:
    return parse_rocminfo(ev.text("rocminfo")) if ev.text("rocminfo") else {}


def stamp(ev: Evidence) -> dict[str, Any]:
    try:
        data = json.loads(ev.text("build_stamp")) if ev.ok("build_stamp") else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def build_archs(ev: Evidence) -> list[str]:
    """PYTORCH_ROCM_ARCH the venv's vLLM was built for (the stamp's key inputs)."""
    archs = (stamp(ev).get("inputs") or {}).get("archs") or []
    return sorted({str(a) for a in archs})


def versions(ev: Evidence) -> dict[str, Any]:
    text = ev.text("versions")
    start = text.find("{")
    if start < 0:
        return {}
    try:
        data = json.loads(text[start:].split("\n--- stderr ---\n")[0])
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def dist(ev: Evidence, name: str) -> str | None:
    dists = versions(ev).get("dists") or {}
    if dists.get(name):
        return str(dists[name])
    for line in ev.text("pip_freeze").splitlines():
        left, sep, right = line.partition("==")
        if sep and left.strip().lower().replace("_", "-") == name and right:
            return right.strip()
    return None


def major(version: str | None) -> int | None:
    match = re.match(r"^(\d+)", version or "")
    return int(match.group(1)) if match else None


def minor_tuple(version: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", (version or "").split("+")[0])[:3])


def amdgpu_loaded(ev: Evidence) -> bool | None:
    """True / False from lsmod (None when lsmod was not collected)."""
    if not ev.ok("lsmod"):
        return None
    return bool(parse_lsmod(ev.text("lsmod"))["amdgpu_loaded"])


def dkms_entries(ev: Evidence) -> list[dict[str, str]]:
    return [e for e in parse_dkms_status(ev.text("dkms_status")) if e["module"] == "amdgpu"]


def running_kernel(ev: Evidence) -> str | None:
    parts = ev.text("uname").split()
    return parts[2] if len(parts) > 2 else None


def group_names(ev: Evidence) -> set[str] | None:
    """Groups in ``id <user>`` output (None when not collected or the user does not exist)."""
    text = ev.text("service_user_groups")
    if not ev.ok("service_user_groups") or "groups=" not in text:
        return None
    return set(re.findall(r"\d+\(([^)]+)\)", text.split("groups=", 1)[1]))


def vram_bytes(ev: Evidence) -> int | None:
    """Total VRAM over all GPUs: rocm-smi --showmeminfo vram, else amd-smi static --json."""
    totals = [
        int(x) for x in re.findall(r"VRAM Total Memory \(B\):\s*(\d+)", ev.text("rocm-smi_vram"))
    ]
    if totals:
        return sum(totals)
    static = parse_amd_smi_static(ev.text("amd-smi_static")) if ev.ok("amd-smi_static") else {}
    sizes = [g["vram_gib"] for g in static.get("gpus", []) if g.get("vram_gib")]
    if sizes:
        return int(sum(sizes) * 2**30)
    return None


def model_bytes(ev: Evidence) -> int | None:
    match = re.search(r"^weight_bytes:\s*(\d+)", ev.text("model"), re.MULTILINE)
    return int(match.group(1)) if match else None


def gpu_memory_utilization(ev: Evidence) -> float:
    """The --gpu-memory-utilization in the unit's ExecStart (vLLM's default 0.9)."""
    match = re.search(r"--gpu-memory-utilization[= ]([0-9.]+)", ev.text("unit_file"))
    return float(match.group(1)) if match else 0.9
