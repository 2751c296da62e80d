"""lspci parsing (module_utils/_gpu_facts/pci.py) on real recorded outputs."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.instinct.vllm.plugins.module_utils._gpu_facts import pci

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "instinct"


def load(name: str) -> str:
    return (FIX / name).read_text(encoding="utf-8")


def test_plain_lspci_8_mi300x_by_name() -> None:
    devices = pci.parse_lspci(load("lspci_grep_mi300_8gpu.txt"))
    assert len(devices) == 8
    assert {d["product"] for d in devices} == {"MI300X"}
    assert {d["arch"] for d in devices} == {"gfx942"}
    assert devices[0]["bdf"] == "0000:1b:00.0"
    assert devices[-1]["bdf"] == "0000:dd:00.0"
    assert all(d["device_id"] == "74a1" and not d["vf"] for d in devices)


def test_lspci_nn_line_with_ids_and_class() -> None:
    (dev,) = pci.parse_lspci(load("lspci_nn_mi300x_single_line_xe9680.txt"))
    assert dev["vendor_id"] == "1002" and dev["device_id"] == "74a1"
    assert dev["class_id"] == "1200"
    assert dev["product"] == "MI300X" and dev["known"]


def test_pf_and_vf_with_kernel_driver_lines() -> None:
    pf, vf = pci.parse_lspci(load("lspci_nnk_grep1002_mi300x_pf_and_vf_host_gim.txt"))
    assert pf["device_id"] == "74a1" and not pf["vf"]
    assert pf["driver_in_use"] == "gim"  # the doc author's inline comment is dropped
    assert pf["kernel_modules"] == ["amdgpu"]
    assert vf["device_id"] == "74b5" and vf["vf"] and vf["product"] == "MI300X VF"
    assert vf["driver_in_use"] == "vfio-pci"
    assert vf["bdf"] == "0000:85:02.0"


def test_vf_in_guest_with_old_pci_ids_is_identified_by_id() -> None:
    (dev,) = pci.parse_lspci(load("lspci_nnkk_grep1002_mi300x_vf_in_guest.txt"))
    assert dev["name"].endswith("Device [1002:74b5]")  # no product name in this pci.ids
    assert dev["product"] == "MI300X VF" and dev["arch"] == "gfx942"


def test_domains_kept_and_usb_function_skipped() -> None:
    devices = pci.parse_lspci(load("lspci_D_grep_process_usb_mi300a_4apu.txt"))
    assert [d["bdf"] for d in devices] == [
        "0000:01:00.0",
        "0001:01:00.0",
        "0002:01:00.0",
        "0003:01:00.0",
    ]
    assert {d["product"] for d in devices} == {"MI300A"}


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # an unknown AMD accelerator is kept (arch unknown) so preflight can name it
        (
            "c1:00.0 Processing accelerators [1200]: Advanced Micro Devices, Inc. [AMD/ATI] "
            "Device [1002:75a3]",
            ("unknown AMD accelerator 1002:75a3", None),
        ),
        # an AMD display GPU that is not in the table is not an Instinct accelerator
        (
            "03:00.0 VGA compatible controller [0300]: Advanced Micro Devices, Inc. [AMD/ATI] "
            "Navi 31 [1002:744c] (rev c8)",
            None,
        ),
        # another vendor's accelerator
        (
            "17:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] "
            "[10de:2330] (rev a1)",
            None,
        ),
    ],
)
def test_other_devices(line: str, expected: tuple[str, str | None] | None) -> None:
    devices = pci.parse_lspci(line + "\n")
    if expected is None:
        assert devices == []
    else:
        assert (devices[0]["product"], devices[0]["arch"]) == expected


def test_empty_output() -> None:
    assert pci.parse_lspci("") == []


@pytest.mark.parametrize(
    ("bdf", "normal", "short"),
    [
        ("1b:00.0", "0000:1b:00.0", "1b:00.0"),
        ("0001:01:00.0", "0001:01:00.0", "01:00.0"),
        ("0000:DD:00.0", "0000:dd:00.0", "dd:00.0"),
    ],
)
def test_bdf_helpers(bdf: str, normal: str, short: str) -> None:
    assert pci.normalize_bdf(bdf) == normal
    assert pci.short_bdf(bdf) == short


def test_every_table_entry_is_consistent() -> None:
    for did, info in pci.INSTINCT_PCI_IDS.items():
        assert len(did) == 4 and did == did.lower()
        assert info["arch"].startswith("gfx")
        assert info["vf"] == info["product"].endswith(" VF")
    assert pci.lookup_device("0x74A1")["product"] == "MI300X"
    assert pci.lookup_device("74b5")["vf"] is True
    assert pci.lookup_device("740c")["arch"] == "gfx90a"
    assert pci.lookup_device("738c")["arch"] == "gfx908"
    assert pci.lookup_device(None) is None
