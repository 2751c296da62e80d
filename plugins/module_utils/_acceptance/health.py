"""amd-smi health readings (probes.HEALTH) against the site's thresholds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Thresholds:
    max_hotspot_c: float = 95.0
    max_vram_c: float = 95.0
    max_ecc_correctable: int = 0
    max_ecc_uncorrectable: int = 0
    xgmi_required: bool = True
    expected_gpus: int = 0  # 0: any number above zero


def _error(value: Any) -> str | None:
    return value.get("error") if isinstance(value, dict) else None


def gpu_problems(gpu: dict[str, Any], limits: Thresholds) -> list[str]:
    """Why this GPU fails the gate (empty: healthy)."""
    label = f"GPU {gpu.get('index')} ({gpu.get('bdf')})"
    problems = []
    for sensor, limit in (("hotspot", limits.max_hotspot_c), ("vram", limits.max_vram_c)):
        value = gpu.get("temperature", {}).get(sensor)
        if _error(value):
            problems.append(f"{label}: {sensor} temperature unreadable: {_error(value)}")
        elif value is None or value > limit:
            problems.append(f"{label}: {sensor} temperature {value} C above {limit} C")
    ecc = gpu.get("ecc")
    if _error(ecc) or not isinstance(ecc, dict):
        problems.append(f"{label}: ECC counts unreadable: {_error(ecc)}")
    else:
        for key, limit in (
            ("uncorrectable_count", limits.max_ecc_uncorrectable),
            ("correctable_count", limits.max_ecc_correctable),
        ):
            if int(ecc.get(key, 0)) > limit:
                problems.append(f"{label}: ECC {key} {ecc[key]} above {limit}")
    return problems


def link_problems(links: list[dict[str, Any]], limits: Thresholds) -> tuple[str, list[str]]:
    """(XGMI state, problems): 'n/a' with one GPU, 'xgmi' when every pair is XGMI-linked,
    'partial' or 'absent' otherwise (a problem when xgmi_required, MI300X defaults)."""
    if not links:
        return "n/a", []
    broken = [f"GPU {x['src']}-{x['dst']}: {x['error']}" for x in links if _error(x)]
    other = [
        f"GPU {x['src']}-{x['dst']}: {x.get('type')}"
        for x in links
        if not _error(x) and x.get("type") != "XGMI"
    ]
    xgmi = len(links) - len(broken) - len(other)
    state = "xgmi" if xgmi == len(links) else ("absent" if xgmi == 0 else "partial")
    problems = [f"link unreadable: {b}" for b in broken]
    if limits.xgmi_required or state == "partial":
        problems += [f"not an XGMI link: {o}" for o in other]
    return state, problems


def evaluate(readings: dict[str, Any], limits: Thresholds) -> tuple[bool, str, dict[str, Any]]:
    """(healthy, reason, detail) for the node."""
    if readings.get("error"):
        return False, readings["error"], {}
    gpus = readings.get("gpus", [])
    problems: list[str] = []
    if not gpus:
        problems.append("amdsmi lists no GPU")
    elif limits.expected_gpus and len(gpus) != limits.expected_gpus:
        problems.append(f"amdsmi lists {len(gpus)} GPUs, expected {limits.expected_gpus}")
    per_gpu = []
    for gpu in gpus:
        mine = gpu_problems(gpu, limits)
        per_gpu.append({**gpu, "ok": not mine})
        problems += mine
    state, linked = link_problems(readings.get("links", []), limits)
    problems += linked
    detail = {"gpu_count": len(gpus), "gpus": per_gpu, "xgmi": state, "problems": problems}
    detail["thresholds"] = limits.__dict__.copy()
    if problems:
        more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
        return False, "; ".join(problems[:3]) + more, detail
    return True, f"{len(gpus)} GPUs within thresholds, XGMI {state}", detail
