"""Verify role rocm on a sandbox host that installed from the signed local test repository."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / ".collections"))

from ansible_collections.instinct.vllm.plugins.module_utils import gpu_facts  # noqa: E402

JOURNAL_UNITS = ["instinct-aptrepo"]
REPO = "http://127.0.0.1:8642"
KEYRING = "/etc/apt/keyrings/rocm.asc"
PREFIX = "/opt/rocm-6.2.1"
FETCH = (
    "import sys, urllib.request; "
    f"sys.stdout.write(urllib.request.urlopen('{REPO}/rocm/rocm.gpg.key').read().decode())"
)
SOURCES = {
    "amdgpu": f"{REPO}/amdgpu/6.2.1/ubuntu",
    "rocm": f"{REPO}/rocm/apt/6.2.1",
}


def deb822(text: str) -> dict[str, str]:
    fields = {}
    for line in text.splitlines():
        if ":" in line and not line.startswith((" ", "#")):
            key, value = line.split(":", 1)
            fields[key.strip()] = value.strip()
    return fields


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_deb822_source_is_signed_by_the_keyring(host, name):
    source = host.file(f"/etc/apt/sources.list.d/{name}.sources")
    assert source.exists
    fields = deb822(source.content_string)
    assert fields["URIs"] == SOURCES[name]
    assert fields["Suites"] == "bookworm"
    assert fields["Components"] == "main"
    assert fields["Signed-By"] == KEYRING
    assert fields["Types"] == "deb"


def test_no_legacy_sources_or_keys(host):
    assert not host.file("/etc/apt/sources.list.d/rocm.list").exists
    assert not host.file("/etc/apt/sources.list.d/amdgpu.list").exists
    listing = host.check_output("ls -A /etc/apt/sources.list.d")
    assert sorted(n for n in listing.split() if "rocm" in n or "amdgpu" in n) == [
        "amdgpu.sources",
        "rocm.sources",
    ]


def test_keyring_holds_the_served_key(host):
    key = host.file(KEYRING)
    assert key.exists and key.user == "root" and key.mode == 0o644
    served = host.check_output(f"python3 -c {shlex.quote(FETCH)}")
    assert key.content_string.strip() == served.strip()
    assert key.content_string.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")


def test_apt_accepts_the_sources_without_warnings(host):
    # only the vendor sources: no network to Debian needed, and any Signed-By conflict shows
    update = host.run("apt-get -o Dir::Etc::SourceList=/dev/null update")
    assert update.rc == 0, update.stderr
    assert "W:" not in update.stderr and "E:" not in update.stderr, update.stderr
    assert "Conflicting values" not in update.stdout + update.stderr


def test_pin_makes_the_vendor_origin_win(host):
    pin = host.file("/etc/apt/preferences.d/rocm-pin-600")
    assert "Pin: release o=instinct-test-aptrepo" in pin.content_string
    assert "Pin-Priority: 600" in pin.content_string
    policy = host.check_output("apt-cache policy rocm")
    assert f"600 {SOURCES['rocm']} bookworm/main" in policy


@pytest.mark.parametrize(
    ("package", "version"),
    [
        ("amdgpu-dkms", "1:6.8.5.60201-2041575.24.04"),
        ("amdgpu-dkms-firmware", "1:6.8.5.60201-2041575.24.04"),
        ("rocm", "6.2.1.60201-112~24.04"),
        ("rocm-hip-runtime", "6.2.1.60201-112~24.04"),
        ("rocminfo", "1.0.0.60201-112~24.04"),
        ("amd-smi-lib", "24.6.3.60201-112~24.04"),
        ("rocm-smi-lib", "7.3.0.60201-112~24.04"),
        ("rocm-core", "6.2.1.60201-112~24.04"),
    ],
)
def test_packages_installed_from_the_test_repository(host, package, version):
    pkg = host.package(package)
    assert pkg.is_installed
    assert pkg.version == version


def test_driver_installed_once(host):
    # the stub amdgpu-dkms logs each configure: idempotence and check mode must not reinstall
    log = host.file("/var/lib/instinct-stub/amdgpu-dkms.log").content_string.splitlines()
    assert len([line for line in log if " configure " in line]) == 1
    assert "previous=none" in log[0]


def test_no_amdgpu_blacklist(host):
    out = host.run("grep -rlE '^\\s*blacklist\\s+amdgpu' /etc/modprobe.d")
    assert out.stdout.strip() == ""


def test_service_user_in_gpu_groups(host):
    groups = host.user("gpuservice").groups
    assert "render" in groups and "video" in groups


def test_ld_so_finds_the_rocm_libraries(host):
    conf = host.file("/etc/ld.so.conf.d/rocm.conf").content_string.splitlines()
    assert f"{PREFIX}/lib" in conf and f"{PREFIX}/lib64" in conf
    cache = host.check_output("ldconfig -p")
    assert f"libamdhip64.so.6 (libc6,x86-64) => {PREFIX}/lib/libamdhip64.so.6" in cache


def test_login_shell_path_has_the_rocm_tools(host):
    assert host.check_output("bash -lc 'command -v rocminfo'") == f"{PREFIX}/bin/rocminfo"
    # sourcing twice adds it once
    path = host.check_output("bash -lc '. /etc/profile.d/rocm.sh; echo $PATH'")
    assert path.split(":").count(f"{PREFIX}/bin") == 1


def test_numa_balancing_persisted(host):
    conf = host.file("/etc/sysctl.d/90-instinct-rocm.conf").content_string
    assert "kernel.numa_balancing=0" in conf.replace(" ", "")


def test_grub_drop_in_adds_iommu_pt(host):
    cfg = host.file("/etc/default/grub.d/90-instinct-rocm.cfg").content_string
    expected = "${GRUB_CMDLINE_LINUX_DEFAULT:+$GRUB_CMDLINE_LINUX_DEFAULT }iommu=pt"
    assert f'GRUB_CMDLINE_LINUX_DEFAULT="{expected}"' in cfg
    # what update-grub computes from it
    script = (
        'GRUB_CMDLINE_LINUX_DEFAULT="quiet"; . /etc/default/grub.d/90-instinct-rocm.cfg; '
        'echo "$GRUB_CMDLINE_LINUX_DEFAULT"'
    )
    line = host.check_output(f"bash -c {shlex.quote(script)}")
    assert line == "quiet iommu=pt"


def test_reboot_needed_but_skipped_in_the_container(host):
    marker = json.loads(
        host.file("/var/lib/instinct-vllm/rocm-reboot-required.json").content_string
    )
    assert marker["boot_id"] == host.file("/proc/sys/kernel/random/boot_id").content_string.strip()
    assert any("amdgpu driver" in reason for reason in marker["reasons"])
    assert any("kernel command line" in reason for reason in marker["reasons"])
    # and the container was not rebooted: PID 1 is the one prepare saw
    before = host.file("/var/tmp/molecule-pid1-start").content_string.strip()
    assert host.check_output("cut -d' ' -f22 /proc/1/stat") == before


# ---- the stack's kernel (rocm_kernel_pin, molecule.yml): rocm-6.2.1's newest validated ABI

KERNEL = "6.8.0-41-generic"
KERNEL_PKGS = [f"linux-{part}-{KERNEL}" for part in ("image", "headers", "modules-extra")]


def test_the_stacks_kernel_is_installed_and_held(host):
    for name in KERNEL_PKGS:
        assert host.package(name).is_installed, name
        assert host.package(name).version == "6.8.0-41.41"
    held = host.check_output("apt-mark showhold").split()
    assert sorted(held) == sorted(KERNEL_PKGS)


def test_newer_kernel_abis_are_pinned_away(host):
    pin = host.file("/etc/apt/preferences.d/instinct-kernel-pin").content_string
    assert "Pin-Priority: -1" in pin
    newer = host.check_output("apt-cache policy linux-image-6.8.0-100-generic")
    assert "Candidate: (none)" in newer
    assert "6.8.0-100.100 -1" in newer
    # the meta-package that would pull the newer ABI cannot be installed
    pulled = host.run("apt-get install --simulate --no-install-recommends linux-image-generic")
    assert pulled.rc != 0
    assert (
        "linux-image-6.8.0-100-generic but it is not installable" in pulled.stdout + pulled.stderr
    )
    own = host.check_output(f"apt-cache policy linux-image-{KERNEL}")
    assert "Candidate: 6.8.0-41.41" in own


def test_grub_boots_the_stacks_kernel_by_default(host):
    cfg = host.file("/etc/default/grub.d/89-instinct-kernel.cfg").content_string
    assert f'GRUB_DEFAULT="Advanced options for Ubuntu>Ubuntu, with Linux {KERNEL}"' in cfg
    script = "GRUB_DEFAULT=0; . /etc/default/grub.d/89-instinct-kernel.cfg; echo $GRUB_DEFAULT"
    assert host.check_output(f"bash -c {shlex.quote(script)}").endswith(f"Linux {KERNEL}")


def test_the_kernel_reboot_is_reported_not_done_in_the_container(host):
    marker = json.loads(
        host.file("/var/lib/instinct-vllm/rocm-reboot-required.json").content_string
    )
    assert any(f"is not the stack kernel {KERNEL}" in reason for reason in marker["reasons"])


def test_gpu_facts_after_install_8_x_gfx942(host):
    """The collection's own GPU-facts parsers, fed by the installed tools on the host."""
    tools = {
        "lspci": "/usr/local/sbin/lspci",
        "rocminfo": f"{PREFIX}/bin/rocminfo",
        "amd_smi": f"{PREFIX}/bin/amd-smi",
        "rocm_smi": f"{PREFIX}/bin/rocm-smi",
        "lsmod": None,
        "dkms": None,
    }
    for key in ("lspci", "rocminfo", "amd_smi"):
        assert host.file(tools[key]).exists, tools[key]

    def run(argv):
        result = host.run(" ".join(f"'{a}'" for a in argv))
        return result.rc, result.stdout, result.stderr

    facts = gpu_facts.collect(tools, run, sources=["pci", "rocminfo", "amd_smi"])
    assert facts["pci"]["count"] == 8
    assert facts["rocminfo"]["status"] == "ok"
    assert facts["rocminfo"]["gpu_agent_count"] == 8
    assert facts["count"] == 8
    assert facts["archs"] == ["gfx942"]
    assert facts["products"] == ["MI300X"]


def test_partition_modes_from_the_installed_rocm_smi(host):
    """Role rocm's verify reads the modes with rocm-smi; the stub replays a recorded SPX / NPS1."""
    from ansible_collections.instinct.vllm.plugins.plugin_utils.rocm_verify import (
        partitions_check,
    )

    def run(argv):
        result = host.run(" ".join(f"'{a}'" for a in argv))
        return result.rc, result.stdout, result.stderr

    tools = {key: None for key in gpu_facts.TOOLS} | {"rocm_smi": f"{PREFIX}/bin/rocm-smi"}
    facts = gpu_facts.collect(tools, run, sources=["rocm_smi"])
    assert facts["partition_modes"]["status"] == "ok", facts["partition_modes"]
    verdict = partitions_check(facts)
    assert verdict["ok"] and (verdict["compute"], verdict["memory"]) == ("SPX", "NPS1")


# ---- the amdsmi Python binding (stub amd_smi in amd-smi-lib): what vLLM 0.6.x detects ROCm by

AMD_SMI = "/opt/rocm/share/amd_smi"
VENV = "/var/tmp/amdsmi-venv"
WHEELHOUSE = "/usr/share/python-wheels"  # setuptools (python3-venv), wheel (prepare.yml)
# vLLM 0.6.6.post1's own detection (vllm/platforms/__init__.py lines 42-52), run in the venv
DETECT = (
    "import amdsmi\n"
    "amdsmi.amdsmi_init()\n"
    "try:\n"
    "    handles = amdsmi.amdsmi_get_processor_handles()\n"
    "    print(len(handles), ' '.join(amdsmi.amdsmi_get_gpu_device_bdf(h) for h in handles))\n"
    "finally:\n"
    "    amdsmi.amdsmi_shut_down()\n"
)


@pytest.fixture(scope="module")
def amdsmi_venv(host):
    """A fresh venv with `pip install /opt/rocm/share/amd_smi`, as upstream's ROCm build does;
    offline, pip builds it from a local wheelhouse (Debian's setuptools and wheel wheels), as
    an air-gapped site gives it its own."""
    host.run(f"rm -rf {VENV}")
    host.check_output(f"python3 -m venv {VENV}")
    before = host.run(f"{VENV}/bin/python -c 'import amdsmi'")
    install = host.run(
        f"{VENV}/bin/pip install --no-index --find-links {WHEELHOUSE} --no-cache-dir {AMD_SMI}"
    )
    return before, install


def test_amd_smi_is_where_a_node_has_it(host):
    assert host.file("/opt/rocm").is_symlink
    assert host.check_output("readlink -f /opt/rocm") == PREFIX
    assert host.file(f"{AMD_SMI}/pyproject.toml").exists
    owner = host.check_output(f"dpkg -S {PREFIX}/share/amd_smi/amdsmi/amdsmi_interface.py")
    assert owner.startswith("amd-smi-lib:")


def test_pip_installs_the_binding_into_a_venv(host, amdsmi_venv):
    before, install = amdsmi_venv
    assert before.rc != 0 and "No module named 'amdsmi'" in before.stderr
    assert install.rc == 0, install.stdout + install.stderr
    show = host.check_output(f"{VENV}/bin/pip show amdsmi")
    assert "Name: amdsmi" in show
    where = host.check_output(
        f"cd / && {VENV}/bin/python -c 'import amdsmi; print(amdsmi.__file__)'"
    )
    assert where.startswith(f"{VENV}/lib/")


def test_vllm_detection_sees_the_8_recorded_gpus(host, amdsmi_venv):
    out = host.check_output(f"cd / && {VENV}/bin/python -c {shlex.quote(DETECT)}")
    count, *bdfs = out.split()
    recorded = json.loads(
        host.file(
            f"{PREFIX}/share/amd_smi/amdsmi/recordings/amd-smi_static_json_mi300x_8gpu_rocm7.2.1.json"
        ).content_string
    )
    assert int(count) == 8
    assert bdfs == [gpu["bus"]["bdf"] for gpu in recorded["gpu_data"]]


def test_detection_fails_without_gpus(host, amdsmi_venv):
    result = host.run(
        f"cd / && INSTINCT_STUB_AMDSMI_MODE=no-gpu {VENV}/bin/python -c {shlex.quote(DETECT)}"
    )
    assert result.rc == 0 and result.stdout.split() == ["0"]


def test_installing_from_a_rocm_without_amd_smi_fails_clearly(host, amdsmi_venv):
    # a ROCm tree without amd-smi-lib: pip names the missing directory
    missing = "/opt/rocm-6.2.1-without-amd-smi-lib/share/amd_smi"
    result = host.run(f"{VENV}/bin/pip install --no-index --find-links {WHEELHOUSE} {missing}")
    assert result.rc != 0
    assert missing in result.stderr and "does not exist" in result.stderr
