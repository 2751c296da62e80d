"""Role rocm's verification of the GPUs ROCm sees (filter instinct.vllm.rocm_agents_check).

rocminfo lists one gfx agent per GPU in SPX mode, and several per GPU when it is partitioned
(compute partitions: DPX 2, QPX 4, CPX 8 agents on one MI300X, all on the GPU's PCI address).
gpu_facts counts the agents on each PCI address as that GPU's ``partitions``; a node is sound
when every GPU lspci finds has at least one agent, every agent sits on such a GPU, all GPUs are
partitioned alike, and every arch is one the stack supports.
"""

from __future__ import annotations

from typing import Any

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
