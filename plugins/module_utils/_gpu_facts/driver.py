# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""amdgpu kernel driver state: ``/sys/module/amdgpu``, ``lsmod``, ``dkms status``, modprobe.d.

Standard library only; every function takes text (or a directory path) and never changes
anything. The in-box (kernel) amdgpu has no ``/sys/module/amdgpu/version``; the DKMS driver
(amdgpu-dkms) has one and loads helper modules (amdkcl, amdttm, amdxcp, ...).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

#: Modules that only the out-of-tree amdgpu-dkms build loads (observed in lsmod on MI300X).
DKMS_HELPER_MODULES: frozenset[str] = frozenset(
    {"amdkcl", "amdttm", "amddrm_ttm_helper", "amddrm_buddy"}
)

_VERSION = re.compile(r"^\d+\.\d+[\w.\-+~]*$")
_DKMS = re.compile(
    r"^(?P<module>[\w-]+)[/,]\s*(?P<version>[^,\s]+),\s*(?P<kernel>[^,\s]+),\s*(?P<arch>[^:\s]+):\s*(?P<status>.+?)\s*$"
)
_BLACKLIST = re.compile(r"^\s*(?:blacklist\s+amdgpu|install\s+amdgpu\s+/bin/(?:false|true))\b")


def parse_sys_module_version(text: str | None) -> str | None:
    """Contents of ``/sys/module/amdgpu/version`` (or a ``cat`` error) -> version or None."""
    if not text:
        return None
    value = text.strip()
    return value if _VERSION.match(value) else None


def parse_lsmod(text: str) -> dict[str, Any]:
    """``lsmod`` output -> ``{amdgpu_loaded, used_by, dkms_helpers}``."""
    modules: dict[str, list[str]] = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) < 3 or parts[0] == "Module" or not parts[1].isdigit():
            continue
        modules[parts[0]] = parts[3].split(",") if len(parts) > 3 else []
    return {
        "amdgpu_loaded": "amdgpu" in modules,
        "used_by": modules.get("amdgpu", []),
        "dkms_helpers": sorted(DKMS_HELPER_MODULES & set(modules)),
    }


def parse_dkms_status(text: str) -> list[dict[str, str]]:
    """``dkms status`` lines -> ``[{module, version, kernel, arch, status}]``.

    Both layouts: ``amdgpu/6.10.5-2119913.24.04, 6.8.0-55-generic, x86_64: installed`` and the
    older ``amdgpu, 6.10.5..., 6.8.0-55-generic, x86_64: installed``.
    """
    entries = []
    for line in (text or "").splitlines():
        match = _DKMS.match(line.strip())
        if match:
            entries.append(
                {k: match.group(k) for k in ("module", "version", "kernel", "arch", "status")}
            )
    return entries


def find_blacklist(modprobe_dir: str | Path) -> list[str]:
    """Files under ``modprobe_dir`` that blacklist amdgpu (``blacklist amdgpu`` or an install
    override to /bin/false). Blacklisting amdgpu disables the GPU: ROCm runs on that driver."""
    found = []
    directory = Path(modprobe_dir)
    if not directory.is_dir():
        return found
    for path in sorted(directory.glob("*.conf")):
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        if any(_BLACKLIST.match(line) for line in lines):
            found.append(str(path))
    return found


#: EFI global variable GUID; the SecureBoot variable is 4 attribute bytes, then 1 (on) or 0.
SECURE_BOOT_VAR = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def secure_boot_state(efivars_dir: str | Path, mokutil_text: str | None = None) -> str:
    """``enabled``, ``disabled`` or ``unknown`` (legacy BIOS boot, a container, no access).

    Reads the EFI variable; ``mokutil --sb-state`` output ("SecureBoot enabled/disabled") is
    the fallback. With Secure Boot on, the kernel loads a DKMS-built amdgpu only if it is
    signed with an enrolled key.
    """
    try:
        data = (Path(efivars_dir) / SECURE_BOOT_VAR).read_bytes()
    except OSError:
        data = b""
    if len(data) >= 5:
        return "enabled" if data[4] == 1 else "disabled"
    text = mokutil_text or ""
    if "SecureBoot enabled" in text:
        return "enabled"
    if "SecureBoot disabled" in text or "doesn't support Secure Boot" in text:
        return "disabled"
    return "unknown"


#: Where Ubuntu's DKMS keeps the key it signs modules with (shim-signed's
#: update-secureboot-policy creates it; https://wiki.ubuntu.com/UEFI/SecureBoot/DKMS).
MOK_KEY = "/var/lib/shim-signed/mok/MOK.der"


def mok_key_state(key_exists: bool, mokutil_test_text: str | None = None) -> str:
    """Whether the DKMS signing key is enrolled as a Machine Owner Key: ``enrolled``,
    ``not_enrolled``, ``no_key`` (no key yet: DKMS makes one and asks for its enrolment when a
    module is first built) or ``unknown``. ``mokutil_test_text``: ``mokutil --test-key <key>``
    output ("... is already enrolled" / "... is not enrolled")."""
    if not key_exists:
        return "no_key"
    text = mokutil_test_text or ""
    if "is already enrolled" in text:
        return "enrolled"
    if "is not enrolled" in text:
        return "not_enrolled"
    return "unknown"


def driver_state(
    sys_module_dir: str | Path,
    lsmod_text: str | None = None,
    amd_smi_amdgpu_version: str | None = None,
) -> dict[str, Any]:
    """Combine sysfs (and lsmod, amd-smi) into ``{loaded, kind, version, initstate, source}``.

    ``kind``: ``dkms`` (version file or DKMS helper modules present), ``inbox`` (loaded without
    a version file), ``none`` (not loaded).
    """
    module_dir = Path(sys_module_dir) / "amdgpu"
    loaded = module_dir.is_dir()
    initstate = None
    version = None
    try:
        initstate = (module_dir / "initstate").read_text(encoding="utf-8").strip() or None
    except OSError:
        initstate = None
    try:
        version = parse_sys_module_version((module_dir / "version").read_text(encoding="utf-8"))
    except OSError:
        version = None
    source = "sysfs" if loaded else None
    lsmod = parse_lsmod(lsmod_text) if lsmod_text is not None else None
    if lsmod is not None and not loaded and lsmod["amdgpu_loaded"]:
        loaded, source = True, "lsmod"
    if version is None and amd_smi_amdgpu_version:
        version = amd_smi_amdgpu_version
    dkms_like = (version is not None and source == "sysfs") or bool(lsmod and lsmod["dkms_helpers"])
    kind = "none" if not loaded else ("dkms" if dkms_like else "inbox")
    return {
        "loaded": loaded,
        "kind": kind,
        "version": version,
        "initstate": initstate,
        "source": source,
        "dkms_helpers": lsmod["dkms_helpers"] if lsmod else [],
    }
