"""amdgpu driver state (module_utils/_gpu_facts/driver.py) on real outputs and fake sysfs trees."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.instinct.vllm.plugins.module_utils._gpu_facts import collect as col
from ansible_collections.instinct.vllm.plugins.module_utils._gpu_facts import driver as drv

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "instinct"


def load(name: str) -> str:
    return (FIX / name).read_text(encoding="utf-8")


def test_sys_module_version() -> None:
    assert (
        drv.parse_sys_module_version(load("sys_module_amdgpu_version_mi300x_vf.txt")) == "6.12.12"
    )
    # the in-box driver has no version file: the cat error is not a version
    assert (
        drv.parse_sys_module_version(
            load("sys_module_amdgpu_version_missing_inbox_driver_mi300x.txt")
        )
        is None
    )
    assert drv.parse_sys_module_version("") is None


def test_lsmod_dkms_module_set() -> None:
    state = drv.parse_lsmod(load("lsmod_grep_amdgpu_mi300x_vf_dkms.txt"))
    assert state["amdgpu_loaded"] is True
    assert "amdkcl" in state["dkms_helpers"] and "amdttm" in state["dkms_helpers"]


def test_lsmod_without_amdgpu() -> None:
    text = "Module                  Size  Used by\nxt_conntrack           12288  1\n"
    assert drv.parse_lsmod(text) == {"amdgpu_loaded": False, "used_by": [], "dkms_helpers": []}


def test_dkms_status() -> None:
    (entry,) = drv.parse_dkms_status(load("dkms_status_amdgpu_mi100_rocm6.3.3.txt"))
    assert entry == {
        "module": "amdgpu",
        "version": "6.10.5-2119913.24.04",
        "kernel": "6.8.0-55-generic",
        "arch": "x86_64",
        "status": "installed",
    }
    assert drv.parse_dkms_status("") == []


def _sysfs(tmp_path: Path, version: str | None, initstate: str = "live") -> Path:
    module = tmp_path / "sys" / "module" / "amdgpu"
    module.mkdir(parents=True)
    (module / "initstate").write_text(initstate + "\n")
    if version is not None:
        (module / "version").write_text(version + "\n")
    return tmp_path / "sys" / "module"


def test_driver_state_dkms(tmp_path: Path) -> None:
    sysdir = _sysfs(tmp_path, load("sys_module_amdgpu_version_mi300x_vf.txt").strip())
    state = drv.driver_state(sysdir, load("lsmod_grep_amdgpu_mi300x_vf_dkms.txt"))
    assert state["loaded"] and state["kind"] == "dkms" and state["version"] == "6.12.12"
    assert state["initstate"] == "live" and state["source"] == "sysfs"


def test_driver_state_inbox(tmp_path: Path) -> None:
    sysdir = _sysfs(tmp_path, None)
    state = drv.driver_state(sysdir, "amdgpu 17424384 0\n")
    assert state["loaded"] and state["kind"] == "inbox" and state["version"] is None


def test_driver_state_not_loaded(tmp_path: Path) -> None:
    state = drv.driver_state(tmp_path / "nothing", "Module Size Used by\n")
    assert state["loaded"] is False and state["kind"] == "none"


def test_blacklist_found(tmp_path: Path) -> None:
    (tmp_path / "blacklist-amdgpu.conf").write_text("# old install notes\nblacklist amdgpu\n")
    (tmp_path / "other.conf").write_text("options amdgpu ras_enable=1\n# blacklist amdgpu\n")
    (tmp_path / "disable.conf").write_text("install amdgpu /bin/false\n")
    found = drv.find_blacklist(tmp_path)
    assert found == [str(tmp_path / "blacklist-amdgpu.conf"), str(tmp_path / "disable.conf")]
    assert drv.find_blacklist(tmp_path / "missing") == []


def test_secure_boot_state(tmp_path: Path) -> None:
    var = tmp_path / drv.SECURE_BOOT_VAR
    var.write_bytes(b"\x06\x00\x00\x00\x01")
    assert drv.secure_boot_state(tmp_path) == "enabled"
    var.write_bytes(b"\x06\x00\x00\x00\x00")
    assert drv.secure_boot_state(tmp_path) == "disabled"
    missing = tmp_path / "none"
    assert drv.secure_boot_state(missing) == "unknown"
    assert drv.secure_boot_state(missing, "SecureBoot enabled\n") == "enabled"
    assert drv.secure_boot_state(missing, "SecureBoot disabled\n") == "disabled"
    assert (
        drv.secure_boot_state(missing, "EFI variables are not supported on this system\n")
        == "unknown"
    )


def test_mok_key_state() -> None:
    key = "/var/lib/shim-signed/mok/MOK.der"
    assert drv.mok_key_state(True, f"{key} is already enrolled\n") == "enrolled"
    assert drv.mok_key_state(True, f"{key} is not enrolled\n") == "not_enrolled"
    assert drv.mok_key_state(False, None) == "no_key"
    assert drv.mok_key_state(True, "EFI variables are not supported on this system\n") == "unknown"
    assert drv.mok_key_state(True, None) == "unknown"


def test_collect_driver_tests_the_dkms_key_only_with_secure_boot_on(tmp_path: Path) -> None:
    efivars = tmp_path / "efivars"
    efivars.mkdir()
    key = tmp_path / "MOK.der"
    key.write_bytes(b"0")
    calls: list[list[str]] = []

    def run(argv: list[str]) -> tuple[int, str, str]:
        calls.append(argv)
        return 1, f"{argv[-1]} is not enrolled\n", ""

    paths = col.HostPaths(
        str(tmp_path / "sys"),
        str(tmp_path / "modprobe"),
        efivars_dir=str(efivars),
        mok_key=str(key),
    )
    tools = {"mokutil": "/usr/bin/mokutil"}
    (efivars / drv.SECURE_BOOT_VAR).write_bytes(b"\x06\x00\x00\x00\x01")
    on = col.collect_driver(tools, run, paths, None)
    assert (on["secure_boot"], on["mok_key"]) == ("enabled", "not_enrolled")
    assert calls == [["/usr/bin/mokutil", "--test-key", str(key)]]
    key.unlink()
    assert col.collect_driver(tools, run, paths, None)["mok_key"] == "no_key"
    (efivars / drv.SECURE_BOOT_VAR).write_bytes(b"\x06\x00\x00\x00\x00")
    off = col.collect_driver(tools, run, paths, None)
    assert (off["secure_boot"], off["mok_key"]) == ("disabled", None)
