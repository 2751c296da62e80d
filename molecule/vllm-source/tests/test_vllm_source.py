"""vllm-source: one compile per build key, three installs of the same wheel, stamps, imports."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import testinfra

HOSTS = ["vllm-source-1", "vllm-source-2", "vllm-source-3"]
VENV = "/opt/vllm/venv"
WORK = "/var/lib/instinct-vllm/source"
SHA256 = "d9035954a2028fd7efb2c37e137d69b568d80f193b6a8748f885676292a43a95"


@pytest.fixture(scope="module")
def hosts():
    return {name: testinfra.get_host(f"podman://{name}") for name in HOSTS}


@pytest.fixture(scope="module")
def stamps(hosts):
    return {
        n: json.loads(h.file(f"{VENV}/instinct-vllm-source.json").content_string)
        for n, h in hosts.items()
    }


def test_every_host_is_stamped_with_the_same_key_and_wheel(stamps):
    keys = {s["key"] for s in stamps.values()}
    assert len(keys) == 1, stamps
    assert len({s["sha256"] for s in stamps.values()}) == 1
    stamp = stamps[HOSTS[0]]
    assert stamp["wheel"] == "vllm-0.6.6.post1+empty-py3-none-any.whl"
    assert stamp["inputs"]["vllm"]["sha256"] == SHA256
    assert stamp["inputs"]["knobs"]["target_device"] == "empty"
    assert [p["name"] for p in stamp["inputs"]["patches"]] == ["0001-build-pin-cmake-below-4.patch"]
    assert "skipped" in stamp["verified"]["torch_version_hip"]


def test_exactly_one_host_compiled(hosts, stamps):
    key = stamps[HOSTS[0]]["key"]
    built = [n for n, h in hosts.items() if h.file(f"{WORK}/{key}/build.log").exists]
    assert len(built) == 1, built
    assert {s["built_by"] for s in stamps.values()} == set(built)
    others = [h for n, h in hosts.items() if n not in built]
    for h in others:
        assert not h.file(f"{WORK}/{key}/vllm-0.6.6.post1").exists  # no source, no build


def test_the_build_used_the_expected_environment_and_the_patched_tree(hosts, stamps):
    key = stamps[HOSTS[0]]["key"]
    builder = hosts[stamps[HOSTS[0]]["built_by"]]
    header = builder.file(f"{WORK}/{key}/build.log").content_string.splitlines()[0]
    assert "VLLM_TARGET_DEVICE=empty" in header and "PYTORCH_ROCM_ARCH" not in header
    # MAX_JOBS = min(cores, MemAvailable // 8 GiB), at least 1 (free memory varies here).
    nproc = int(builder.check_output("nproc"))
    jobs = int(next(t for t in header.split() if t.startswith("MAX_JOBS=")).split("=")[1])
    assert 1 <= jobs <= nproc
    reqs = builder.file(f"{WORK}/{key}/vllm-0.6.6.post1/requirements-build.txt").content_string
    assert "cmake>=3.26,<4" in reqs.splitlines()
    cmake = builder.check_output(f"{VENV}/bin/python -m pip show cmake")
    version = next(line.split()[1] for line in cmake.splitlines() if line.startswith("Version:"))
    assert int(version.split(".")[0]) == 3  # the patch is what kept pip off cmake 4


def test_every_host_installed_the_same_wheel_and_imports_vllm(hosts, stamps):
    for name, h in hosts.items():
        key = stamps[name]["key"]
        wheel = f"{WORK}/{key}/wheel/{stamps[name]['wheel']}"
        assert h.file(wheel).sha256sum == stamps[name]["sha256"], name
        out = h.check_output(
            f"VLLM_NO_USAGE_STATS=1 {VENV}/bin/python -c "
            "'import json, importlib.metadata as md, torch, vllm; "
            'print(json.dumps([vllm.__version__, md.version("vllm"), torch.__version__]))\''
        )
        got = json.loads(out.splitlines()[-1])
        # vllm.__version__ comes from setuptools_scm (no local suffix); the distribution's
        # version carries the build target, as setup.py's get_vllm_version() makes it.
        assert got == ["0.6.6.post1", "0.6.6.post1+empty", "2.13.0+cpu"], (name, got)


def test_the_wheel_came_back_to_the_controller_with_its_checksum(stamps):
    ephemeral = os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY")
    if not ephemeral:
        pytest.skip("MOLECULE_EPHEMERAL_DIRECTORY is not set (not run by molecule)")
    d = Path(ephemeral) / "wheels" / stamps[HOSTS[0]]["key"]
    sums = (d / f"{stamps[HOSTS[0]]['wheel']}.sha256").read_text().split()
    assert sums[0] == stamps[HOSTS[0]]["sha256"]
    assert (d / "runtime-requirements.txt").read_text().strip()
