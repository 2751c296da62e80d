"""Role rocm's GPU verification (filter instinct.vllm.rocm_agents_check) on gpu_facts built from
the recorded 8 x MI300X lspci and rocminfo: SPX passes; the same node partitioned (8 agents per
GPU as CPX shows them, 2 as DPX) passes with its mode; a GPU without an agent, an agent on no
GPU lspci lists, mixed partitioning and a foreign arch fail."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.instinct.vllm.plugins.filter.rocm import (
    rocm_agents_check,
    rocm_partitions_check,
)
from ansible_collections.instinct.vllm.plugins.module_utils._gpu_facts import collect as gf

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "instinct"
RECORDED = {
    "lspci": "lspci_grep_mi300_8gpu.txt",
    "rocminfo": "rocminfo_mi300x_8gpu_xeon8470.txt",
}


@pytest.fixture(scope="module")
def spx(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("host")
    (root / "modprobe.d").mkdir()

    def run(argv: list[str]) -> tuple[int, str, str]:
        name = os.path.basename(argv[0])
        return 0, (FIX / RECORDED[name]).read_text(encoding="utf-8"), ""

    tools = {k: (f"/usr/bin/{k}" if k in RECORDED else None) for k in gf.TOOLS}
    return gf.collect(
        tools,
        run,
        sources=["pci", "rocminfo"],
        sys_module_dir=str(root / "sys"),
        modprobe_dir=str(root / "modprobe.d"),
        dev_dir=str(root / "dev"),
        rocm_path=str(root / "rocm"),
        efivars_dir=str(root / "efi"),
    )


def partitioned(facts: dict, per_gpu: list[int]) -> dict:
    """The facts of the same node with that many agents on each GPU's address."""
    out = copy.deepcopy(facts)
    for gpu, count in zip(out["gpus"], per_gpu, strict=True):
        gpu["partitions"] = count
    out["rocminfo"]["gpu_agent_count"] = sum(per_gpu)
    return out


def test_recorded_spx_node_passes(spx: dict):
    verdict = rocm_agents_check(spx, ["gfx942"])
    assert verdict == {"ok": True, "problems": [], "mode": "SPX", "partitions": 8}


@pytest.mark.parametrize(("count", "mode"), [(8, "CPX"), (2, "DPX"), (4, "QPX")])
def test_partitioned_node_passes_with_its_mode(spx: dict, count: int, mode: str):
    verdict = rocm_agents_check(partitioned(spx, [count] * 8), ["gfx942"])
    assert verdict["ok"], verdict["problems"]
    assert (verdict["mode"], verdict["partitions"]) == (mode, 8 * count)


def test_a_gpu_without_agent_fails(spx: dict):
    verdict = rocm_agents_check(partitioned(spx, [1] * 7 + [0]), ["gfx942"])
    assert not verdict["ok"]
    assert verdict["problems"][0].startswith("no gfx agent on 1 GPU(s) lspci finds:")


def test_an_agent_on_no_listed_gpu_fails(spx: dict):
    facts = copy.deepcopy(spx)
    facts["rocminfo"]["gpu_agent_count"] = 9
    verdict = rocm_agents_check(facts, ["gfx942"])
    assert verdict["problems"] == ["rocminfo shows 9 gfx agent(s), 8 on the GPUs lspci finds"]


def test_mixed_partitioning_and_foreign_arch_fail(spx: dict):
    verdict = rocm_agents_check(partitioned(spx, [8] * 7 + [1]), ["gfx90a"])
    assert verdict["mode"] == "mixed"
    assert verdict["problems"] == [
        "GPUs partitioned differently: [1, 8] agents per GPU",
        "archs gfx942 not in the stack's gfx90a",
    ]


def test_no_pci_gpu_fails_and_bad_input_is_refused(spx: dict):
    facts = copy.deepcopy(spx)
    facts["pci"] = {"status": "no_devices", "count": 0}
    assert "lspci finds no AMD GPU (no_devices)" in rocm_agents_check(facts, ["gfx942"])["problems"]
    with pytest.raises(AnsibleFilterError):
        rocm_agents_check([], ["gfx942"])


# --- rocm-smi's partition modes (filter instinct.vllm.rocm_partitions_check) -------------------

MODES = "rocm-smi_showcomputepartition_showmemorypartition_mi300x_4gpu.txt"


def modes_facts(text: str, rc: int = 0) -> dict:
    """gpu_facts' partition_modes, from rocm-smi answering with that text."""
    return {
        "partition_modes": gf.collect_partition_modes(
            "/usr/bin/rocm-smi", lambda _a: (rc, text, "")
        )
    }


def recorded_modes() -> str:
    return (FIX / MODES).read_text(encoding="utf-8")


def test_recorded_modes_pass_and_are_reported():
    verdict = rocm_partitions_check(modes_facts(recorded_modes()))
    assert verdict["ok"] and verdict["problems"] == []
    assert (verdict["compute"], verdict["memory"]) == ("SPX", "NPS1")
    assert verdict["summary"] == (
        "compute partition SPX, memory partition NPS1 (4 device(s) in rocm-smi)"
    )


def test_one_gpu_in_another_compute_mode_fails_naming_it():
    text = recorded_modes().replace(
        "GPU[2]\t\t: Compute Partition: SPX", "GPU[2]\t\t: Compute Partition: CPX"
    )
    verdict = rocm_partitions_check(modes_facts(text))
    assert not verdict["ok"]
    assert verdict["problems"] == ["compute partition modes differ: GPU[2] CPX; the others SPX"]


def test_one_gpu_in_another_memory_mode_fails_naming_it():
    text = recorded_modes().replace(
        "GPU[0]\t\t: Memory Partition: NPS1", "GPU[0]\t\t: Memory Partition: NPS4"
    )
    verdict = rocm_partitions_check(modes_facts(text))
    assert verdict["problems"] == ["memory partition modes differ: GPU[0] NPS4; the others NPS1"]


def test_a_mode_rocm_smi_6_2_1_does_not_know_fails():
    text = recorded_modes().replace("Compute Partition: SPX", "Compute Partition: UNKNOWN")
    verdict = rocm_partitions_check(modes_facts(text))
    assert not verdict["ok"]
    assert verdict["problems"] == [
        "compute partition mode not one of SPX, DPX, TPX, QPX, CPX: "
        "GPU[0] UNKNOWN, GPU[1] UNKNOWN, GPU[2] UNKNOWN, GPU[3] UNKNOWN"
    ]


def test_devices_that_cannot_say_are_counted_not_judged():
    text = (
        recorded_modes()
        .replace(
            "GPU[3]\t\t: Compute Partition: SPX", "GPU[3]\t\t: Not supported on the given system"
        )
        .replace(
            "GPU[3]\t\t: Memory Partition: NPS1", "GPU[3]\t\t: Not supported on the given system"
        )
    )
    verdict = rocm_partitions_check(modes_facts(text))
    assert verdict["ok"]
    assert verdict["summary"].endswith("(4 device(s) in rocm-smi, 1 without a mode)")


def test_no_rocm_smi_or_a_failing_one_judges_nothing():
    missing = {"partition_modes": gf.collect_partition_modes(None, lambda _a: (0, "", ""))}
    assert rocm_partitions_check(missing)["ok"]
    assert rocm_partitions_check(missing)["summary"] == "partition modes unknown (not_installed)"
    failed = rocm_partitions_check(modes_facts("Traceback: boom", rc=1))
    assert failed["ok"] and "failed (rc=1)" in failed["summary"]
    assert rocm_partitions_check({})["summary"] == "partition modes unknown (not gathered)"
    with pytest.raises(AnsibleFilterError):
        rocm_partitions_check([])
