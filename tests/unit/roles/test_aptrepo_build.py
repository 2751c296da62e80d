"""tests/aptrepo/build: the signed test repository the rocm scenarios install from."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BUILD = ROOT / "tests" / "aptrepo" / "build"
SPEC = json.loads((ROOT / "tests" / "aptrepo" / "packages.json").read_text())

pytestmark = pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("gpg", "gpgv", "dpkg-deb", "cc")),
    reason="needs gpg, gpgv, dpkg-deb and cc",
)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("aptrepo")
    out = subprocess.run(
        [sys.executable, str(BUILD), "--suite", "testsuite", "--cache", str(cache)],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def stanzas(text: str) -> list[dict[str, str]]:
    result = []
    for block in text.strip().split("\n\n"):
        fields = {}
        for line in block.splitlines():
            key, value = line.split(":", 1)
            fields[key] = value.strip()
        result.append(fields)
    return result


@pytest.mark.parametrize("repo_name", sorted(SPEC["repos"]))
def test_release_is_signed_and_lists_the_indexes(repo: Path, repo_name: str, tmp_path: Path):
    dist = repo / SPEC["repos"][repo_name]["path"] / "dists" / "testsuite"
    keyring = tmp_path / "key.gpg"
    keyring.write_bytes(
        subprocess.run(
            ["gpg", "--dearmor"],
            input=(repo / "rocm" / "rocm.gpg.key").read_bytes(),
            check=True,
            capture_output=True,
        ).stdout
    )
    for args in (["InRelease"], ["Release.gpg", "Release"]):
        subprocess.run(
            ["gpgv", "--keyring", str(keyring), *[str(dist / a) for a in args]],
            check=True,
            capture_output=True,
        )
    release = (dist / "Release").read_text()
    assert "Origin: instinct-test-aptrepo" in release
    assert "Suite: testsuite" in release
    sha = release.split("SHA256:\n", 1)[1]
    for name in ("main/binary-amd64/Packages", "main/binary-amd64/Packages.gz"):
        data = (dist / name).read_bytes()
        assert f" {hashlib.sha256(data).hexdigest()} {len(data):>8} {name}" in sha


def test_packages_index_matches_the_debs_and_dependencies_resolve(repo: Path):
    known: dict[str, str] = {}
    for repo_name, meta in SPEC["repos"].items():
        base = repo / meta["path"]
        index = (base / "dists" / "testsuite" / "main" / "binary-amd64" / "Packages").read_text()
        for pkg in stanzas(index):
            deb = base / pkg["Filename"]
            assert hashlib.sha256(deb.read_bytes()).hexdigest() == pkg["SHA256"]
            assert int(pkg["Size"]) == deb.stat().st_size
            known[pkg["Package"]] = pkg["Version"]
        assert {p["name"] for p in SPEC["packages"] if p["repo"] == repo_name} <= set(known)
    for pkg in SPEC["packages"]:
        for dep in filter(None, (d.strip() for d in pkg["depends"].split(","))):
            name = re.split(r"[ (]", dep)[0]
            assert name in known, f"{pkg['name']} depends on {name}, which no stub provides"
    assert known["rocm"] == "6.2.1.60201-112~24.04"
    assert known["amdgpu-dkms"] == "1:6.8.5.60201-2041575.24.04"


def test_rocminfo_stub_replays_the_8_gpu_recording(repo: Path, tmp_path: Path):
    deb = next((repo / "rocm/apt/6.2.1/pool/main/r/rocminfo").glob("*.deb"))
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp_path)], check=True)
    out = subprocess.run(
        [str(tmp_path / "opt/rocm-6.2.1/bin/rocminfo")], check=True, capture_output=True, text=True
    ).stdout
    recorded = (ROOT / "tests/unit/fixtures/instinct/rocminfo_mi300x_8gpu_xeon8470.txt").read_text()
    assert out == recorded
    assert len(re.findall(r"^\s*Name:\s+gfx942\s*$", out, re.M)) == 8


def test_rocm_smi_stub_replays_the_partition_recording(repo: Path, tmp_path: Path):
    """The rocm scenario's verify reads the partition modes through this stub."""
    deb = next((repo / "rocm/apt/6.2.1/pool/main/r/rocm-smi-lib").glob("*.deb"))
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp_path)], check=True)
    smi = str(tmp_path / "opt/rocm-6.2.1/bin/rocm-smi")
    args = ["--showcomputepartition", "--showmemorypartition"]
    out = subprocess.run([smi, *args], check=True, capture_output=True, text=True).stdout
    recorded = (
        ROOT
        / "tests/unit/fixtures/instinct"
        / "rocm-smi_showcomputepartition_showmemorypartition_mi300x_4gpu.txt"
    ).read_text()
    assert out == recorded
    unrecorded = subprocess.run(
        [smi, "--showcomputepartition"], check=False, capture_output=True, text=True
    )
    assert unrecorded.returncode == 2 and "no recording" in unrecorded.stderr


def test_lspci_stub_adds_the_ids_of_the_real_nn_line(repo: Path):
    script = (
        (repo / "stubs" / "lspci")
        .read_text()
        .replace("/usr/local/share/instinct-stub", str(repo / "stubs"))
    )
    lines = subprocess.run(
        ["sh", "-c", script, "lspci", "-D", "-nn", "-k", "-d", "1002:"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    real = (
        ROOT / "tests/unit/fixtures/instinct/lspci_nn_mi300x_single_line_xe9680.txt"
    ).read_text()
    assert len(lines) == 8
    assert f"0000:{real.strip()}" in lines  # the one recorded -nn line, byte for byte


def test_second_build_is_cached(repo: Path):
    again = subprocess.run(
        [sys.executable, str(BUILD), "--suite", "testsuite", "--cache", str(repo.parent)],
        check=True,
        capture_output=True,
        text=True,
    )
    assert again.stdout.strip() == str(repo)
    assert "inputs unchanged" in again.stderr
