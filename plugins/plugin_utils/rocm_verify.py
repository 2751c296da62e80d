"""Role rocm's verification of the GPUs ROCm sees (filter instinct.vllm.rocm_agents_check).

rocminfo lists one gfx agent per GPU in SPX mode, and several per GPU when it is partitioned
(compute partitions: DPX 2, QPX 4, CPX 8 agents on one MI300X, all on the GPU's PCI address).
gpu_facts counts the agents on each PCI address as that GPU's ``partitions``; a node is sound
when every GPU lspci finds has at least one agent, every agent sits on such a GPU, all GPUs are
partitioned alike, and every arch is one the stack supports.

The partition modes themselves come from rocm-smi (gpu_facts' ``partition_modes``): every
device must report the same compute and the same memory mode, each one ROCm 6.2.1's rocm-smi
knows (:func:`partitions_check`).
"""

from __future__ import annotations

from typing import Any

from ansible_collections.instinct.vllm.plugins.module_utils.gpu_facts import (
    COMPUTE_PARTITIONS,
    MEMORY_PARTITIONS,
)

# agents per GPU -> AMD's compute partition mode names (MI300X)
MODES = {1: "SPX", 2: "DPX", 3: "TPX", 4: "QPX", 8: "CPX"}


def partition_mode(per_gpu: set[int]) -> str:
    if len(per_gpu) != 1:
        return "mixed"
    (count,) = per_gpu
    return MODES.get(count, f"{count} partitions per GPU")


def agents_check(facts: dict[str, Any], archs: list[str]) -> dict[str, Any]:
    """``{ok, problems, mode, partitions}`` for gpu_facts' result against the stack's archs."""
    pci = facts.get("pci") or {}
    rocminfo = facts.get("rocminfo") or {}
    gpus = facts.get("gpus") or []
    per_gpu = [int(g.get("partitions") or 0) for g in gpus]
    agents = int(rocminfo.get("gpu_agent_count") or 0)
    problems = []
    if not pci.get("count"):
        problems.append(f"lspci finds no AMD GPU ({pci.get('status', '?')})")
    if rocminfo.get("status") != "ok":
        problems.append(f"rocminfo: {rocminfo.get('status', '?')} ({rocminfo.get('error')})")
    bare = [str(g.get("bdf")) for g in gpus if not g.get("partitions")]
    if pci.get("count") and rocminfo.get("status") == "ok" and bare:
        problems.append(f"no gfx agent on {len(bare)} GPU(s) lspci finds: {', '.join(bare)}")
    if agents != sum(per_gpu):
        problems.append(
            f"rocminfo shows {agents} gfx agent(s), {sum(per_gpu)} on the GPUs lspci finds"
        )
    mode = partition_mode({n for n in per_gpu if n})
    if mode == "mixed":
        problems.append(f"GPUs partitioned differently: {sorted(set(per_gpu))} agents per GPU")
    unsupported = sorted(set(facts.get("archs") or []) - set(archs))
    if unsupported:
        problems.append(f"archs {', '.join(unsupported)} not in the stack's {', '.join(archs)}")
    return {"ok": not problems, "problems": problems, "mode": mode, "partitions": agents}


def _majority(modes: dict[int, str]) -> str | None:
    """The mode most devices report (the lowest index breaks a tie)."""
    if not modes:
        return None
    counts: dict[str, int] = {}
    for index in sorted(modes):
        counts[modes[index]] = counts.get(modes[index], 0) + 1
    return max(counts, key=lambda mode: counts[mode])


def _mode_problems(kind: str, modes: dict[int, str], known: tuple[str, ...]) -> list[str]:
    """A device whose mode differs from the others', or that the stack's rocm-smi does not know."""
    problems = []
    usual = _majority(modes)
    odd = [i for i in sorted(modes) if modes[i] != usual]
    if odd:
        names = ", ".join(f"GPU[{i}] {modes[i]}" for i in odd)
        problems.append(f"{kind} partition modes differ: {names}; the others {usual}")
    unknown = [i for i in sorted(modes) if modes[i] not in known]
    if unknown:
        names = ", ".join(f"GPU[{i}] {modes[i]}" for i in unknown)
        problems.append(f"{kind} partition mode not one of {', '.join(known)}: {names}")
    return problems


def partitions_check(
    facts: dict[str, Any],
    compute_modes: tuple[str, ...] = COMPUTE_PARTITIONS,
    memory_modes: tuple[str, ...] = MEMORY_PARTITIONS,
) -> dict[str, Any]:
    """``{ok, problems, compute, memory, summary}`` from gpu_facts' ``partition_modes``.

    Every device rocm-smi lists must report the same compute and the same memory mode, each one
    of the modes given (GPU[i] is rocm-smi's device index). Devices that cannot say (not
    supported, N/A) are counted, not judged; without rocm-smi nothing is judged.
    """
    section = facts.get("partition_modes") or {}
    if section.get("status") != "ok":
        why = section.get("error") or section.get("status") or "not gathered"
        return {
            "ok": True,
            "problems": [],
            "compute": None,
            "memory": None,
            "summary": f"partition modes unknown ({why})",
        }
    gpus = section.get("gpus") or []
    compute = {g["index"]: g["compute"] for g in gpus if g.get("compute")}
    memory = {g["index"]: g["memory"] for g in gpus if g.get("memory")}
    problems = _mode_problems("compute", compute, compute_modes)
    problems += _mode_problems("memory", memory, memory_modes)
    silent = len(gpus) - len({*compute, *memory})
    summary = (
        f"compute partition {_majority(compute) or 'not reported'}, memory partition "
        f"{_majority(memory) or 'not reported'} ({len(gpus)} device(s) in rocm-smi"
        + (f", {silent} without a mode)" if silent else ")")
    )
    return {
        "ok": not problems,
        "problems": problems,
        "compute": _majority(compute),
        "memory": _majority(memory),
        "summary": summary,
    }
