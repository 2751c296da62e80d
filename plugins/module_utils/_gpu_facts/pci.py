# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""AMD Instinct GPUs from ``lspci`` output (works before ROCm is installed).

Standard library only. Parses ``lspci -nn`` (optionally with ``-D`` and ``-k``) and plain
``lspci`` (names only). Device IDs and names are those of the PCI ID database (pci.ids,
vendor 1002); the sources are listed in docs/stack-matrix.md.
"""

from __future__ import annotations

import re
from typing import Any, TypedDict

AMD_VENDOR = "1002"


class PciProduct(TypedDict):
    product: str
    arch: str
    family: str
    vf: bool


#: Instinct device IDs (vendor 1002) -> product, LLVM target, family, SR-IOV virtual function.
INSTINCT_PCI_IDS: dict[str, PciProduct] = {
    "738c": {"product": "MI100", "arch": "gfx908", "family": "MI100", "vf": False},
    "738e": {"product": "MI100", "arch": "gfx908", "family": "MI100", "vf": False},
    "7408": {"product": "MI250X", "arch": "gfx90a", "family": "MI200", "vf": False},
    "740c": {"product": "MI250X/MI250", "arch": "gfx90a", "family": "MI200", "vf": False},
    "740f": {"product": "MI210", "arch": "gfx90a", "family": "MI200", "vf": False},
    "74a0": {"product": "MI300A", "arch": "gfx942", "family": "MI300", "vf": False},
    "74a1": {"product": "MI300X", "arch": "gfx942", "family": "MI300", "vf": False},
    "74a2": {"product": "MI308X", "arch": "gfx942", "family": "MI300", "vf": False},
    "74a5": {"product": "MI325X", "arch": "gfx942", "family": "MI300", "vf": False},
    "74a9": {"product": "MI300X HF", "arch": "gfx942", "family": "MI300", "vf": False},
    "74b5": {"product": "MI300X VF", "arch": "gfx942", "family": "MI300", "vf": True},
    "74b9": {"product": "MI325X VF", "arch": "gfx942", "family": "MI300", "vf": True},
    "74bd": {"product": "MI300X HF", "arch": "gfx942", "family": "MI300", "vf": False},
}

#: Product names as lspci prints them ("[Instinct MI300X]") -> device ID, for output without -nn.
_NAME_TO_ID: dict[str, str] = {}
for _did, _info in INSTINCT_PCI_IDS.items():
    _NAME_TO_ID.setdefault(_info["product"], _did)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# "[<domain>:]<bus>:<dev>.<fn> <class name> [<class id>]: <names> [vvvv:dddd] (rev xx)"
_DEVICE_LINE = re.compile(
    r"^(?P<bdf>(?:[0-9a-fA-F]{4,}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+"
    r"(?P<class_name>[^:\[]+?)\s*(?:\[(?P<class_id>[0-9a-fA-F]{4})\])?:\s+"
    r"(?P<desc>.*?)\s*$"
)
_IDS = re.compile(r"\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\]")
_REV = re.compile(r"\s*\(rev [0-9a-fA-F]+\)\s*$")
_INSTINCT_NAME = re.compile(r"\[Instinct (?P<name>MI\d+[A-Z]?(?:/MI\d+[A-Z]?)?(?: VF| HF)?)\]")
_KERNEL_LINE = re.compile(
    r"^\s+(?P<key>Kernel driver in use|Kernel modules|Subsystem):\s*(?P<value>.*?)\s*$"
)


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def normalize_bdf(bdf: str) -> str:
    """``1b:00.0`` -> ``0000:1b:00.0`` (lower case, 4-digit domain)."""
    bdf = bdf.strip().lower()
    parts = bdf.split(":")
    if len(parts) == 2:
        return f"0000:{bdf}"
    domain, rest = parts[0], ":".join(parts[1:])
    return f"{int(domain, 16):04x}:{rest}"


def short_bdf(bdf: str) -> str:
    """``0000:1b:00.0`` -> ``1b:00.0`` (domain dropped, for matching rocminfo BDFIDs)."""
    return normalize_bdf(bdf).split(":", 1)[1]


def lookup_device(device_id: str | None) -> PciProduct | None:
    if not device_id:
        return None
    return INSTINCT_PCI_IDS.get(device_id.lower().removeprefix("0x").zfill(4))


def _device_from_line(match: re.Match[str]) -> dict[str, Any] | None:
    desc = _REV.sub("", match.group("desc"))
    ids = list(_IDS.finditer(desc))
    vendor_id = device_id = None
    if ids:
        vendor_id = ids[-1].group("vendor").lower()
        device_id = ids[-1].group("device").lower()
    name_match = _INSTINCT_NAME.search(desc)
    if vendor_id is None:
        # Plain lspci: only names. An Instinct name identifies the device.
        if not name_match or "AMD" not in desc:
            return None
        vendor_id = AMD_VENDOR
        device_id = _NAME_TO_ID.get(name_match.group("name"))
    if vendor_id != AMD_VENDOR:
        return None
    class_id = (match.group("class_id") or "").lower() or None
    known = lookup_device(device_id)
    accelerator_class = class_id == "1200" or "Processing accelerators" in match.group("class_name")
    if known is None and not accelerator_class:
        return None  # an AMD display GPU, audio or other function: not an Instinct accelerator
    name = name_match.group("name") if name_match else None
    return {
        "bdf": normalize_bdf(match.group("bdf")),
        "vendor_id": vendor_id,
        "device_id": device_id,
        "class_id": class_id,
        "product": known["product"]
        if known
        else (name or f"unknown AMD accelerator {vendor_id}:{device_id}"),
        "arch": known["arch"] if known else None,
        "family": known["family"] if known else None,
        "vf": known["vf"] if known else bool(name and name.endswith(" VF")),
        "known": known is not None,
        "name": desc,
        "driver_in_use": None,
        "kernel_modules": [],
    }


def parse_lspci(text: str) -> list[dict[str, Any]]:
    """Instinct devices in ``lspci [-D] [-nn] [-k]`` output, in the order printed.

    Non-AMD devices, AMD devices that are not accelerators (USB, audio, display GPUs unknown to
    the table) are skipped. ``-k`` lines fill ``driver_in_use`` and ``kernel_modules`` (an
    inline ``# comment`` is dropped).
    """
    devices: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for raw in strip_ansi(text).splitlines():
        if not raw.strip():
            continue
        kernel = _KERNEL_LINE.match(raw)
        if kernel:
            if current is None:
                continue
            value = kernel.group("value").split("#", 1)[0].strip()
            if kernel.group("key") == "Kernel driver in use":
                current["driver_in_use"] = value or None
            elif kernel.group("key") == "Kernel modules":
                current["kernel_modules"] = [m.strip() for m in value.split(",") if m.strip()]
            continue
        if raw[:1].isspace():
            continue  # other -v/-k detail lines
        match = _DEVICE_LINE.match(raw)
        current = _device_from_line(match) if match else None
        if current is not None:
            devices.append(current)
    return devices
