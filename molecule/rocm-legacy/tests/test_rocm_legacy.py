"""Verify that role rocm cleaned up after a manual install and still converged."""

from __future__ import annotations

import json

import pytest

JOURNAL_UNITS = ["instinct-aptrepo"]
OTHER = "F51C04A3BD15222EA13226680D254BCB3BAD3355"  # tests/unit/fixtures/openpgp/README.md


def fingerprints(host, path):
    out = host.check_output(
        f"gpg --batch --homedir /tmp --show-keys --with-colons {path} 2>/dev/null"
    )
    return [line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:")]


def vendor_fingerprint(host):
    return fingerprints(host, "/etc/apt/keyrings/rocm.asc")[0]


@pytest.mark.parametrize("name", ["rocm.list", "amdgpu.list", "radeon-manual.list"])
def test_legacy_source_files_removed(host, name):
    assert not host.file(f"/etc/apt/sources.list.d/{name}").exists


def test_sources_list_keeps_the_distribution_lines_only(host):
    content = host.file("/etc/apt/sources.list").content_string
    assert "127.0.0.1:8642" not in content
    assert "deb.debian.org" in content or "debian" in content


def test_apt_key_copies_of_the_vendor_key_removed(host):
    assert not host.file("/etc/apt/trusted.gpg.d/radeon-legacy.gpg").exists
    remaining = fingerprints(host, "/etc/apt/trusted.gpg")
    assert vendor_fingerprint(host) not in remaining
    assert OTHER in remaining  # the unrelated key apt-key added is kept


def test_apt_is_clean(host):
    update = host.run("apt-get -o Dir::Etc::SourceList=/dev/null update")
    assert update.rc == 0, update.stderr
    assert "W:" not in update.stderr and "E:" not in update.stderr, update.stderr


def test_amdgpu_blacklist_removed_other_lines_kept(host):
    lines = host.file("/etc/modprobe.d/blacklist-amdgpu.conf").content_string.splitlines()
    assert "blacklist amdgpu" not in lines
    assert "blacklist nouveau" in lines


def test_rocm_installed_and_driver_once(host):
    assert host.package("rocm").is_installed
    assert host.package("amdgpu-dkms").version == "1:6.8.5.60201-2041575.24.04"
    log = host.file("/var/lib/instinct-stub/amdgpu-dkms.log").content_string
    assert log.count(" configure ") == 1


def test_reboot_reasons_include_the_blacklist(host):
    marker = json.loads(
        host.file("/var/lib/instinct-vllm/rocm-reboot-required.json").content_string
    )
    assert "an amdgpu blacklist was removed" in marker["reasons"]


def test_the_amdsmi_binding_source_survives_the_cleanup(host):
    # the stub amd-smi-lib's Python package, reached through /opt/rocm as on a node
    assert host.file("/opt/rocm/share/amd_smi/pyproject.toml").exists
    probe = (
        "import amdsmi; amdsmi.amdsmi_init(); "
        "print(len(amdsmi.amdsmi_get_processor_handles())); amdsmi.amdsmi_shut_down()"
    )
    out = host.check_output(f"cd / && PYTHONPATH=/opt/rocm/share/amd_smi python3 -c '{probe}'")
    assert out == "8"
