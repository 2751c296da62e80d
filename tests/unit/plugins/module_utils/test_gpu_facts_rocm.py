"""rocminfo / amd-smi / rocm-smi parsing (module_utils/_gpu_facts/rocm.py) on real outputs."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.instinct.vllm.plugins.module_utils._gpu_facts import rocm

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "instinct"


def load(name: str) -> str:
    return (FIX / name).read_text(encoding="utf-8")


# --- rocminfo ----------------------------------------------------------------------------------


def test_rocminfo_8_mi300x() -> None:
    info = rocm.parse_rocminfo(load("rocminfo_mi300x_8gpu_xeon8470.txt"))
    assert info["status"] == "ok" and info["error"] is None
    assert info["rock_loaded"] is True and info["rock_version"] == "6.8.5"  # ANSI codes stripped
    assert len(info["agents"]) == 10
    gpus = info["gpu_agents"]
    assert len(gpus) == 8
    assert {g["arch"] for g in gpus} == {"gfx942"}
    assert {g["marketing_name"] for g in gpus} == {"AMD Instinct MI300X"}
    assert {g["compute_units"] for g in gpus} == {304}
    assert {g["chip_id"] for g in gpus} == {"74a1"}
    # 201310208 KB coarse-grained pool: an MI300X has 192 GB
    assert {g["vram_gib"] for g in gpus} == {192.0}
    # BDFIDs decode to the same bus addresses lspci shows on this node
    assert sorted(g["bdf"] for g in gpus) == [
        "1b:00.0",
        "3d:00.0",
        "4e:00.0",
        "5f:00.0",
        "9d:00.0",
        "bd:00.0",
        "cd:00.0",
        "dd:00.0",
    ]
    assert gpus[0]["isas"] == ["amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-"]
    cpus = [a for a in info["agents"] if a["device_type"] == "CPU"]
    assert cpus[0]["arch"] is None and cpus[0]["vram_gib"] is None and cpus[0]["bdf"] is None


def test_rocminfo_vf_rocm72_new_fields() -> None:
    info = rocm.parse_rocminfo(load("rocminfo_mi300x_vf_1gpu_rocm7.2.txt"))
    (gpu,) = info["gpu_agents"]
    assert info["rock_version"] == "6.16.13"
    assert gpu["marketing_name"] == "AMD Instinct MI300X VF"
    assert gpu["chip_id"] == "74b5" and gpu["product"] == "MI300X VF"
    assert gpu["bdf"] == "83:00.0"
    assert gpu["vram_gib"] == pytest.approx(191.7)
    assert len(gpu["isas"]) == 2 and "gfx9-4-generic" in gpu["isas"][1]


def test_rocminfo_kfd_invalid_argument_in_container() -> None:
    info = rocm.parse_rocminfo(load("rocminfo_error_kfd_invalid_argument_mi300x_container.txt"))
    assert info["status"] == "kfd_error"
    assert info["rock_loaded"] is True and info["rock_version"] == "6.7.0"
    assert "Invalid argument" in info["error"] and "--device" in info["error"]
    assert info["gpu_agents"] == []


def test_rocminfo_kfd_permission_denied_hint() -> None:
    info = rocm.parse_rocminfo(
        "ROCk module is loaded\nUnable to open /dev/kfd read-write: Permission denied\n"
    )
    assert info["status"] == "kfd_error"
    assert "render" in info["error"] and "video" in info["error"]


def test_rocminfo_rock_not_loaded() -> None:
    info = rocm.parse_rocminfo(load("rocminfo_error_rock_module_not_loaded.txt"))
    assert info["status"] == "rock_not_loaded" and info["rock_loaded"] is False
    assert "amdgpu" in info["error"] and "blacklist" in info["error"]


def test_rocminfo_cpu_agent_only() -> None:
    info = rocm.parse_rocminfo(load("rocminfo_cpu_agent_only_gpu_init_failed.txt"))
    assert info["status"] == "no_gpus"
    assert len(info["agents"]) == 1 and info["gpu_agents"] == []
    assert "no GPU agent" in info["error"]


@pytest.mark.parametrize("text", ["", "bash: rocminfo: command not found\n", "garbage"])
def test_rocminfo_unrecognised(text: str) -> None:
    info = rocm.parse_rocminfo(text)
    assert info["status"] == "unparsable" and info["gpu_agents"] == []


@pytest.mark.parametrize(
    ("bdfid", "bdf"), [(24320, "5f:00.0"), (33536, "83:00.0"), (0, None), (None, None)]
)
def test_bdfid(bdfid: int | None, bdf: str | None) -> None:
    assert rocm.bdfid_to_bdf(bdfid) == bdf


# --- amd-smi -----------------------------------------------------------------------------------


def test_amd_smi_static_json_8_gpus() -> None:
    smi = rocm.parse_amd_smi_static(load("amd-smi_static_json_mi300x_8gpu_rocm7.2.1.json"))
    assert smi["status"] == "ok" and smi["error"] is None
    assert len(smi["gpus"]) == 8
    first = smi["gpus"][0]
    assert first["bdf"] == "0000:1b:00.0"
    assert (
        first["arch"] == "gfx942" and first["device_id"] == "74a1" and first["product"] == "MI300X"
    )
    assert first["compute_units"] == 304
    assert first["vram_gib"] == 192.0  # 196592 MB
    assert first["driver_version"] == "6.16.13"
    assert first["board_product_name"] == "AMD Instinct MI300X OAM"


def test_amd_smi_static_permission_denied_banner_then_na_json() -> None:
    smi = rocm.parse_amd_smi_static(
        load("amd-smi_static_json_nonroot_permission_denied_mi300x_8gpu_rocm7.2.1.txt")
    )
    assert smi["status"] == "permission_denied"
    assert "render" in smi["error"]
    assert len(smi["gpus"]) == 8
    assert smi["gpus"][0]["bdf"] == "0000:1b:00.0"
    assert smi["gpus"][0]["arch"] is None and smi["gpus"][0]["vram_gib"] is None  # "N/A"


def test_amd_smi_static_legacy_list_layout_and_garbage() -> None:
    legacy = (
        '[{"gpu": 0, "asic": {"device_id": "0x74a1", "target_graphics_version": "gfx942"}, '
        '"bus": {"bdf": "0000:05:00.0"}, "vram": {"size": {"value": 196592, "unit": "MB"}}}]'
    )
    smi = rocm.parse_amd_smi_static(legacy)
    assert smi["status"] == "ok" and smi["gpus"][0]["product"] == "MI300X"
    bad = rocm.parse_amd_smi_static("AMDSMI_STATUS_DRIVER_NOT_LOADED\n")
    assert bad["status"] == "unparsable" and "no JSON" in bad["error"]


def test_amd_smi_version_json() -> None:
    ver = rocm.parse_amd_smi_version(load("amd-smi_version_json_mi300x_rocm7.2.1.json"))
    assert ver["rocm_version"] == "7.2.1" and ver["amdgpu_version"] == "6.16.13"
    assert ver["library_version"] == "26.2.2"


def test_amd_smi_version_nonroot_file_error() -> None:
    ver = rocm.parse_amd_smi_version(load("amd-smi_version_json_nonroot_mi300x_rocm7.2.1.json"))
    assert ver["amdgpu_version"] is None
    assert ver["amdgpu_version_raw"].startswith("AMDSMI_STATUS_FILE_ERROR")


def test_amd_smi_version_text_inbox_driver() -> None:
    ver = rocm.parse_amd_smi_version(
        load("amd-smi_version_mi300x_inbox_kernel_driver_rocm6.4.0.txt")
    )
    assert ver["rocm_version"] == "6.4.0"
    assert ver["amdgpu_version"] is None  # the in-box driver: a kernel banner, not a version
    assert ver["amdgpu_version_raw"].startswith("Linuxversion6.8.0")


# --- rocm-smi ----------------------------------------------------------------------------------


def test_rocm_smi_new_layout_8_gpus() -> None:
    smi = rocm.parse_rocm_smi(load("rocm-smi_mi300x_8gpu.txt"))
    assert smi["status"] == "ok"
    assert [g["index"] for g in smi["gpus"]] == list(range(8))
    assert {(g["id"], g["id_kind"], g["arch"]) for g in smi["gpus"]} == {("74a1", "did", "gfx942")}


def test_rocm_smi_old_layout() -> None:
    smi = rocm.parse_rocm_smi(load("rocm-smi_mi300x_4gpu.txt"))
    assert len(smi["gpus"]) == 4 and smi["gpus"][0]["id_kind"] == "model"
    mi210 = rocm.parse_rocm_smi(load("rocm-smi_mi210_8gpu.txt"))
    assert len(mi210["gpus"]) == 8
    assert (
        mi210["gpus"][0]["id"] == "0c34" and mi210["gpus"][0]["product"] is None
    )  # a model, not a DID


def test_rocm_smi_no_gpus() -> None:
    smi = rocm.parse_rocm_smi(load("rocm-smi_no_amd_gpus_driver_init_failed.txt"))
    assert smi["status"] == "no_gpus" and smi["gpus"] == []
    assert "did not initialise" in smi["error"]


def test_rocm_smi_productname() -> None:
    cards = rocm.parse_rocm_smi_productname(load("rocm-smi_showproductname_mi300x_1gpu.txt"))
    assert cards[0]["GFX Version"] == "gfx942"
    assert cards[0]["Card Series"] == "AMD Instinct MI300X OAM"
    apus = rocm.parse_rocm_smi_productname(load("rocm-smi_showproduct_mi300a_4apu.txt"))
    assert len(apus) == 4 and apus[3]["Card Model"] == "0x74a0"


# --- rocm-smi --showcomputepartition --showmemorypartition -------------------------------------

PARTITIONS = "rocm-smi_showcomputepartition_showmemorypartition_mi300x_4gpu.txt"


def test_partitions_4_mi300x_spx_nps1() -> None:
    parsed = rocm.parse_rocm_smi_partitions(load(PARTITIONS))
    assert parsed["status"] == "ok" and parsed["error"] is None
    assert [(g["index"], g["compute"], g["memory"]) for g in parsed["gpus"]] == [
        (i, "SPX", "NPS1") for i in range(4)
    ]


def test_partitions_read_from_the_full_report_too() -> None:
    """`rocm-smi -a` prints the same sections: the other sections' GPU lines are not modes."""
    parsed = rocm.parse_rocm_smi_partitions(load("rocm-smi_-a_mi300x_4gpu.txt"))
    assert [(g["compute"], g["memory"], g["notes"]) for g in parsed["gpus"]] == [
        ("SPX", "NPS1", [])
    ] * 4


def test_partitions_a_device_that_cannot_say() -> None:
    """rocm_smi.py's own lines for a device without partitions, and an N/A value."""
    text = (
        load(PARTITIONS)
        .replace(
            "GPU[1]\t\t: Compute Partition: SPX", "GPU[1]\t\t: Not supported on the given system"
        )
        .replace("GPU[3]\t\t: Memory Partition: NPS1", "GPU[3]\t\t: Memory Partition: N/A")
    )
    gpus = rocm.parse_rocm_smi_partitions(text)["gpus"]
    assert gpus[1]["compute"] is None and gpus[1]["memory"] == "NPS1"
    assert gpus[1]["notes"] == ["compute: Not supported on the given system"]
    assert gpus[3]["memory"] is None and gpus[3]["compute"] == "SPX"


def test_partitions_no_gpus_and_garbage() -> None:
    none = rocm.parse_rocm_smi_partitions(load("rocm-smi_no_amd_gpus_driver_init_failed.txt"))
    assert none["status"] == "no_gpus" and none["gpus"] == []
    other = rocm.parse_rocm_smi_partitions(load("rocm-smi_mi300x_8gpu.txt"))
    assert other["status"] == "unparsable" and "no partition lines" in other["error"]
