"""Role rocm's kernel command line (roles/rocm/vars/main.yml `_rocm_cmdline`, rendered by
Ansible's own templar with the role's defaults): iommu=pt by default, pci=realloc=off only
when asked for (AMD's MI300X guide; needed with SR-IOV disabled in the BIOS)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "galaxy.yml").is_file())
ROLE = ROOT / "roles" / "rocm"


def cmdline(**overrides: object) -> list[str]:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    template = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["_rocm_cmdline"]
    templar = Templar(loader=DataLoader(), variables={**defaults, **overrides})
    return list(templar.template(trust_as_template(template)))


def test_defaults_give_iommu_pt_only():
    assert cmdline() == ["iommu=pt"]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"rocm_tune_pci_realloc_off": True}, ["iommu=pt", "pci=realloc=off"]),
        (
            {
                "rocm_tune_iommu_pt": False,
                "rocm_tune_pci_realloc_off": True,
                "rocm_kernel_cmdline_extra": ["amd_iommu=on"],
            },
            ["pci=realloc=off", "amd_iommu=on"],
        ),
        ({"rocm_tune_iommu_pt": False}, []),
    ],
)
def test_pci_realloc_off_is_opt_in(overrides: dict, expected: list[str]):
    assert cmdline(**overrides) == expected
