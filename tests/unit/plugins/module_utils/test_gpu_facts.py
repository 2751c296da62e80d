"""GPU facts collection (_gpu_facts/collect.py) and the gpu_facts module, on real outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.instinct.vllm.plugins.module_utils._gpu_facts import collect as gf

ROOT = Path(__file__).resolve().parents[4]
FIX = Path(__file__).resolve().parents[2] / "fixtures" / "instinct"


def load(name: str) -> str:
    return (FIX / name).read_text(encoding="utf-8")


class FakeHost:
    """Answers commands with recorded outputs; records what was run."""

    def __init__(self, outputs: dict[tuple[str, ...], tuple[int, str]]) -> None:
        self.outputs = outputs
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str]) -> tuple[int, str, str]:
        self.calls.append(argv)
        key = (os.path.basename(argv[0]), *argv[1:])
        for prefix, (rc, out) in self.outputs.items():
            if key[: len(prefix)] == prefix:
                return rc, out, ""
        raise AssertionError(f"unexpected command {argv}")


def tools(*names: str) -> dict[str, str | None]:
    return {
        key: (f"/usr/bin/{binary}" if key in names else None) for key, binary in gf.TOOLS.items()
    }


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "modprobe.d").mkdir()
    return {
        "sys_module_dir": str(tmp_path / "sys"),
        "modprobe_dir": str(tmp_path / "modprobe.d"),
        "dev_dir": str(tmp_path / "dev"),
        "rocm_path": str(tmp_path / "rocm"),
        "efivars_dir": str(tmp_path / "efivars"),
    }


ROCMINFO_8 = ("rocminfo",)
AMD_SMI_STATIC = ("amd-smi", "static")
AMD_SMI_VERSION = ("amd-smi", "version")
PARTITION_MODES = ("rocm-smi", "--showcomputepartition", "--showmemorypartition")
PARTITIONS_4 = "rocm-smi_showcomputepartition_showmemorypartition_mi300x_4gpu.txt"


def test_before_rocm_pci_only(dirs: dict[str, str]) -> None:
    host = FakeHost({("lspci",): (0, load("lspci_grep_mi300_8gpu.txt"))})
    facts = gf.collect(tools("lspci"), host, **dirs)
    assert facts["count"] == 8 and facts["archs"] == ["gfx942"] and facts["products"] == ["MI300X"]
    assert facts["pci"] == {"tool": "/usr/bin/lspci", "status": "ok", "count": 8, "error": None}
    assert facts["rocminfo"]["status"] == "not_installed"
    assert facts["amd_smi"]["status"] == "not_installed"
    assert facts["rocm_installed"] is False and facts["rocm_version"] is None
    assert facts["driver"]["loaded"] is False and facts["driver"]["kind"] == "none"
    assert facts["problems"] == []
    assert host.calls == [["/usr/bin/lspci", *gf.LSPCI_ARGS]]
    assert all(g["sources"] == ["pci"] and g["partitions"] == 0 for g in facts["gpus"])


def test_after_rocm_everything_merged(dirs: dict[str, str]) -> None:
    host = FakeHost(
        {
            ("lspci",): (0, load("lspci_grep_mi300_8gpu.txt")),
            ROCMINFO_8: (0, load("rocminfo_mi300x_8gpu_xeon8470.txt")),
            AMD_SMI_STATIC: (0, load("amd-smi_static_json_mi300x_8gpu_rocm7.2.1.json")),
            AMD_SMI_VERSION: (0, load("amd-smi_version_json_mi300x_rocm7.2.1.json")),
            PARTITION_MODES: (0, load(PARTITIONS_4)),
        }
    )
    facts = gf.collect(tools("lspci", "rocminfo", "amd_smi", "rocm_smi"), host, **dirs)
    assert facts["count"] == 8 and facts["archs"] == ["gfx942"]
    assert facts["rocminfo"]["gpu_agent_count"] == 8 and facts["rocminfo"]["cpu_agent_count"] == 2
    assert facts["amd_smi"]["gpu_count"] == 8
    assert facts["rocm_version"] == "7.2.1" and facts["rocm_installed"] is True
    gpu = facts["gpus"][0]
    assert gpu["sources"] == ["pci", "rocminfo", "amd_smi"]
    assert gpu["vram_gib"] == 192.0 and gpu["compute_units"] == 304 and gpu["partitions"] == 1
    assert gpu["marketing_name"] == "AMD Instinct MI300X"
    assert facts["rocm_smi"]["status"] == "skipped"  # amd-smi answered
    # the partition modes are read from rocm-smi whatever amd-smi answered
    modes = facts["partition_modes"]
    assert modes["status"] == "ok" and modes["tool"] == "/usr/bin/rocm-smi"
    assert {(g["compute"], g["memory"]) for g in modes["gpus"]} == {("SPX", "NPS1")}
    assert ["/usr/bin/rocm-smi", "--showcomputepartition", "--showmemorypartition"] in host.calls
    assert facts["problems"] == []


def test_container_with_stub_rocminfo_and_no_pci(dirs: dict[str, str]) -> None:
    """The sandbox case: no AMD PCI device visible, rocminfo replays a recorded MI300X node."""
    host = FakeHost(
        {("lspci",): (0, ""), ROCMINFO_8: (0, load("rocminfo_mi300x_8gpu_xeon8470.txt"))}
    )
    facts = gf.collect(tools("lspci", "rocminfo"), host, **dirs)
    assert facts["pci"]["count"] == 0
    assert facts["count"] == 8 and facts["archs"] == ["gfx942"]
    assert facts["gpus"][0]["bdf"] == "0000:1b:00.0" and facts["gpus"][0]["sources"] == ["rocminfo"]


def test_driver_not_loaded_is_a_fact_not_a_crash(dirs: dict[str, str]) -> None:
    host = FakeHost(
        {
            ("lspci",): (0, load("lspci_grep_mi300_8gpu.txt")),
            ROCMINFO_8: (1, load("rocminfo_error_rock_module_not_loaded.txt")),
        }
    )
    facts = gf.collect(tools("lspci", "rocminfo"), host, **dirs)
    assert facts["count"] == 8  # PCI still sees the GPUs
    assert facts["rocminfo"]["status"] == "rock_not_loaded"
    assert facts["rocminfo"]["gpu_agent_count"] == 0
    assert any("ROCk module is NOT loaded" in p for p in facts["problems"])


def test_permission_denied_and_kfd_error(dirs: dict[str, str]) -> None:
    host = FakeHost(
        {
            ("lspci",): (0, load("lspci_grep_mi300_8gpu.txt")),
            ROCMINFO_8: (1, load("rocminfo_error_kfd_invalid_argument_mi300x_container.txt")),
            AMD_SMI_STATIC: (
                0,
                load("amd-smi_static_json_nonroot_permission_denied_mi300x_8gpu_rocm7.2.1.txt"),
            ),
            AMD_SMI_VERSION: (0, load("amd-smi_version_json_nonroot_mi300x_rocm7.2.1.json")),
            ("rocm-smi",): (0, load("rocm-smi_mi300x_8gpu.txt")),
        }
    )
    facts = gf.collect(tools("lspci", "rocminfo", "amd_smi", "rocm_smi"), host, **dirs)
    assert facts["rocminfo"]["status"] == "kfd_error"
    assert facts["amd_smi"]["status"] == "permission_denied"
    assert facts["amd_smi"]["amdgpu_version"] is None
    assert (
        facts["rocm_smi"]["status"] == "ok" and facts["rocm_smi"]["gpu_count"] == 8
    )  # fallback ran
    assert len(facts["problems"]) == 2
    assert facts["count"] == 8 and facts["archs"] == ["gfx942"]


def test_unmatched_agents_are_reported(dirs: dict[str, str]) -> None:
    host = FakeHost(
        {
            ("lspci",): (0, load("lspci_nn_mi300x_single_line_xe9680.txt")),
            ROCMINFO_8: (0, load("rocminfo_mi300x_8gpu_xeon8470.txt")),
        }
    )
    facts = gf.collect(tools("lspci", "rocminfo"), host, **dirs)
    assert facts["count"] == 1 and facts["rocminfo"]["gpu_agent_count"] == 8
    assert any("7 GPU agent(s)" in p for p in facts["problems"])


def test_lspci_failure_and_missing_tool(dirs: dict[str, str]) -> None:
    host = FakeHost({("lspci",): (1, "pcilib: Cannot open /proc/bus/pci")})
    facts = gf.collect(tools("lspci"), host, **dirs)
    assert facts["pci"]["status"] == "error" and "Cannot open" in facts["pci"]["error"]
    facts = gf.collect(tools(), FakeHost({}), **dirs)
    assert facts["pci"]["status"] == "not_installed" and "pciutils" in facts["problems"][0]
    assert facts["count"] == 0


def test_runner_oserror_is_handled(dirs: dict[str, str]) -> None:
    def broken(argv: list[str]) -> tuple[int, str, str]:
        raise OSError("Exec format error")

    facts = gf.collect(tools("lspci", "rocminfo"), broken, **dirs)
    assert facts["pci"]["status"] == "error" and "Exec format error" in facts["pci"]["error"]
    assert facts["rocminfo"]["status"] == "unparsable"


def test_blacklist_and_driver_from_sysfs(dirs: dict[str, str]) -> None:
    Path(dirs["modprobe_dir"], "blacklist-amdgpu.conf").write_text("blacklist amdgpu\n")
    module = Path(dirs["sys_module_dir"], "amdgpu")
    module.mkdir(parents=True)
    (module / "version").write_text(load("sys_module_amdgpu_version_mi300x_vf.txt"))
    rocm_info = Path(dirs["rocm_path"], ".info")
    rocm_info.mkdir(parents=True)
    (rocm_info / "version").write_text("6.2.1-112\n")
    host = FakeHost({("lsmod",): (0, load("lsmod_grep_amdgpu_mi300x_vf_dkms.txt"))})
    facts = gf.collect(tools("lsmod"), host, sources=["driver"], **dirs)
    assert facts["driver"]["loaded"] and facts["driver"]["kind"] == "dkms"
    assert facts["driver"]["version"] == "6.12.12"
    assert facts["driver"]["blacklisted_in"] == [
        str(Path(dirs["modprobe_dir"], "blacklist-amdgpu.conf"))
    ]
    assert any("blacklisted" in p and "disables the GPUs" in p for p in facts["problems"])
    assert facts["rocm_version"] == "6.2.1-112" and facts["rocm_installed"] is True
    assert facts["pci"]["status"] == "skipped"


def test_secure_boot_from_efi_variable_or_mokutil(dirs: dict[str, str]) -> None:
    efivars = Path(dirs["efivars_dir"])
    efivars.mkdir()
    (efivars / "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c").write_bytes(b"\x06\0\0\0\x01")
    host = FakeHost({})
    facts = gf.collect(tools("mokutil"), host, sources=["driver"], **dirs)
    assert facts["driver"]["secure_boot"] == "enabled" and host.calls == []  # no mokutil needed
    (efivars / "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c").unlink()
    host = FakeHost({("mokutil", "--sb-state"): (0, "SecureBoot disabled\n")})
    facts = gf.collect(tools("mokutil"), host, sources=["driver"], **dirs)
    assert facts["driver"]["secure_boot"] == "disabled"
    facts = gf.collect(tools(), FakeHost({}), sources=["driver"], **dirs)
    assert facts["driver"]["secure_boot"] == "unknown"


def test_sources_limit_commands(dirs: dict[str, str]) -> None:
    host = FakeHost({})
    gf.collect(tools("lspci", "rocminfo", "amd_smi", "rocm_smi"), host, sources=[], **dirs)
    assert host.calls == []


# --- the module, end to end, with stub tools that print the recorded outputs ----------------


def _stub(bin_dir: Path, name: str, fixture: str, rc: int = 0) -> None:
    script = bin_dir / name
    script.write_text(f"#!/bin/sh\ncat '{FIX / fixture}'\nexit {rc}\n")
    script.chmod(0o755)


def test_module_with_stub_tools(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stub(bin_dir, "lspci", "lspci_grep_mi300_8gpu.txt")
    _stub(bin_dir, "rocminfo", "rocminfo_mi300x_8gpu_xeon8470.txt")
    args = {
        "sources": ["pci", "rocminfo"],
        "search_paths": [str(bin_dir)],
        "sys_module_dir": str(tmp_path / "sys"),
        "modprobe_dir": str(tmp_path),
    }
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {"ansible_python_interpreter": sys.executable},
            "tasks": [{"instinct.vllm.gpu_facts": args}],
        }
    ]
    playbook = tmp_path / "play.yml"
    playbook.write_text(json.dumps(play))  # JSON is YAML
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
    )
    ansible_playbook = str(Path(sys.executable).parent / "ansible-playbook")
    proc = subprocess.run(
        [ansible_playbook, "-i", "localhost,", "-c", "local", "--check", str(playbook)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert result["changed"] is False
    facts = result["gpu_facts"]
    assert facts["count"] == 8 and facts["archs"] == ["gfx942"]
    assert facts["rocminfo"]["gpu_agent_count"] == 8
    assert result["ansible_facts"]["instinct_vllm_gpu_facts"]["count"] == 8
