"""vllm-source: one CPU compile per build key, two installs of the same wheel, stamps, imports."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import testinfra

HOSTS = ["vllm-source-1", "vllm-source-2"]
VENV = "/opt/vllm/venv"
WORK = "/var/lib/instinct-vllm/source"
SHA256 = "d9035954a2028fd7efb2c37e137d69b568d80f193b6a8748f885676292a43a95"


@pytest.fixture(scope="module")
def hosts():
    return {name: testinfra.get_host(f"sandbox://{name}") for name in HOSTS}


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
    assert stamp["wheel"] == "vllm-0.6.6.post1+cpu-cp311-cp311-linux_x86_64.whl"
    assert stamp["inputs"]["vllm"]["sha256"] == SHA256
    assert stamp["inputs"]["knobs"] == {
        "target_device": "cpu",
        "env": {"VLLM_CPU_DISABLE_AVX512": "true"},
    }
    # the stack's series, then the sandbox's (vllm_source_patch_dirs)
    assert [p["name"] for p in stamp["inputs"]["patches"]] == [
        "0001-build-pin-cmake-below-4.patch",
        "0002-openai-answer-malformed-requests-with-400.patch",
        "0003-xgrammar-rejected-token-does-not-kill-the-engine.patch",
        "sandbox-0001-cpu-target-with-pypi-cuda-torch.patch",
    ]
    assert "skipped" in stamp["verified"]["torch_version_hip"]
    # role vllm's platform probe loaded the compiled extension (files/stacks.yml: the cpu
    # target builds vllm._C only) before the stamp was written
    assert stamp["verified"]["extensions"] == {"vllm._C": "loaded"}


def test_exactly_one_host_compiled(hosts, stamps):
    key = stamps[HOSTS[0]]["key"]
    built = [n for n, h in hosts.items() if h.file(f"{WORK}/{key}/build.log").exists]
    if {s["built_by"] for s in stamps.values()} == {"an earlier run"}:
        assert built == []  # the controller had the key's wheel: nobody compiled
        return
    assert len(built) == 1, built
    assert {s["built_by"] for s in stamps.values()} == set(built)
    others = [h for n, h in hosts.items() if n not in built]
    for h in others:
        assert not h.file(f"{WORK}/{key}/vllm-0.6.6.post1").exists  # no source, no build


def test_the_build_used_the_expected_environment_and_the_patched_tree(hosts, stamps):
    key = stamps[HOSTS[0]]["key"]
    if stamps[HOSTS[0]]["built_by"] == "an earlier run":
        pytest.skip("the wheel of this build key was cached: no build in this run")
    builder = hosts[stamps[HOSTS[0]]["built_by"]]
    header = builder.file(f"{WORK}/{key}/build.log").content_string.splitlines()[0]
    assert "VLLM_TARGET_DEVICE=cpu" in header and "PYTORCH_ROCM_ARCH" not in header
    assert "VLLM_CPU_DISABLE_AVX512=true" in header
    log = builder.file(f"{WORK}/{key}/build.log").content_string
    assert "vLLM CPU backend using AVX2 ISA" in log  # cmake/cpu_extension.cmake's choice
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
        # one interpreter per host: vllm, torch and vLLM's compiled extension (vllm._C)
        out = h.check_output(
            f"VLLM_NO_USAGE_STATS=1 {VENV}/bin/python -c "
            "'import json, importlib.metadata as md, torch, vllm, vllm._C; "
            'print(json.dumps([vllm.__version__, md.version("vllm"), torch.__version__]))\''
        )
        got = json.loads(out.splitlines()[-1])
        # vllm.__version__ comes from setuptools_scm (no local suffix); the distribution's
        # version carries the build target, as setup.py's get_vllm_version() makes it.
        # torch: PyPI's 2.5.1 (the CUDA build, running on the CPU; molecule.yml)
        assert got == ["0.6.6.post1", "0.6.6.post1+cpu", "2.5.1+cu124"], (name, got)


def test_the_wheel_came_back_to_the_controller_with_its_checksum(stamps):
    cache = Path(os.environ.get("INSTINCT_CACHE", "/var/cache/instinct-vllm"))
    d = cache / "vllm-source" / "wheels" / stamps[HOSTS[0]]["key"]
    sums = (d / f"{stamps[HOSTS[0]]['wheel']}.sha256").read_text().split()
    assert sums[0] == stamps[HOSTS[0]]["sha256"]
    assert (d / "runtime-requirements.txt").read_text().strip()


def _freeze(host) -> dict[str, str]:
    out = host.check_output(
        f"{VENV}/bin/python -c 'import json, importlib.metadata as md; "
        'print(json.dumps({d.metadata["Name"].lower().replace("_", "-"): d.version '
        "for d in md.distributions()}))'"
    )
    return json.loads(out)


def _lock(text: str) -> dict[str, str]:
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[name.strip().lower().replace("_", "-").replace(".", "-")] = version.strip()
    return pins


def _key(host) -> str:
    return json.loads(host.file(f"{VENV}/instinct-vllm-source.json").content_string)["key"]


def test_every_host_installed_the_stack_lock(hosts):
    want = (Path(__file__).resolve().parents[3] / "files/locks/sandbox-rocm-6.2.1.txt").read_text()
    for name, h in hosts.items():
        assert h.file(f"{VENV}/instinct-vllm-lock.txt").content_string == want, name
        have = _freeze(h)
        locked = _lock(want)
        # Local versions: the lock pins torch==2.5.1, the wheel installed is 2.5.1+cu124.
        off = {
            n: (v, locked[n.replace(".", "-")])
            for n, v in have.items()
            if n.replace(".", "-") in locked and v.split("+")[0] != locked[n.replace(".", "-")]
        }
        if not h.file(f"{WORK}/{_key(h)}/build.log").exists:
            # only the builder installs the build requirements: elsewhere setuptools is the
            # one `python3 -m venv` seeded (Debian 12: 66.1.1), never used by pip there
            off.pop("setuptools", None)
        assert not off, (name, off)
        # vLLM 0.6.6 reads tokenizer.all_special_tokens_extended, which transformers 5 removed.
        assert int(have["transformers"].split(".")[0]) == 4, (name, have["transformers"])
        assert int(have["numpy"].split(".")[0]) == 1, (name, have["numpy"])


def test_the_rocm_steps_were_skipped_for_the_stated_reason(stamps):
    verified = stamps[HOSTS[0]]["verified"]
    assert verified["triton"] == "skipped: stack sandbox-rocm-6.2.1 has no ROCm (rocm: null)"


def test_vllm_loaded_the_model_with_its_own_tokenizer_and_model_config(hosts):
    got = json.loads(hosts[HOSTS[0]].file("/var/lib/instinct-vllm/contract.json").content_string)
    assert got["step"] == "done", got
    assert got["architectures"] == ["LlamaForCausalLM"]
    assert got["max_model_len"] == 128
    # get_cached_tokenizer (0.6.6) wraps it: the class name says vLLM's own code loaded it.
    assert got["tokenizer"] == "CachedPreTrainedTokenizerFast" and got["vocab"] == 256


def test_vllm_own_platform_detection_says_rocm_with_the_stub_amdsmi(hosts, tmp_path):
    """vLLM 0.6.6's own vllm.platforms: ROCm exactly when the amdsmi binding sees GPUs.

    The node's venv has no amdsmi (the sandbox stack has no ROCm), so vLLM reports 'cpu'
    there (the "+cpu" of the wheel's version; the role's platform check asserts that). Here
    the test stub of the binding (tests/aptrepo/stubs/amd_smi, replaying the recorded
    8 x MI300X amd-smi output) is put on PYTHONPATH: the same vLLM code must then choose its
    ROCm platform, and with the stub in its no-GPU mode fall back to 'cpu' again.
    """
    root = Path(__file__).resolve().parents[3]
    stub = tmp_path / "amd_smi"
    shutil.copytree(root / "tests/aptrepo/stubs/amd_smi", stub)
    recordings = stub / "amdsmi" / "recordings"
    recordings.mkdir()
    for name in (
        "amd-smi_static_json_mi300x_8gpu_rocm7.2.1.json",
        "amd-smi_static_json_nonroot_permission_denied_mi300x_8gpu_rocm7.2.1.txt",
        "amd-smi_monitor_putm_mi300x_8gpu.txt",
        "vllm_collect_env_mi300x_8gpu_rocm6.2.txt",
    ):
        shutil.copy(root / "tests/unit/fixtures/instinct" / name, recordings / name)
    host = hosts[HOSTS[0]]
    host.run("rm -rf /tmp/amd_smi")
    subprocess.run(["podman", "cp", str(stub), f"{HOSTS[0]}:/tmp/amd_smi"], check=True)
    probe = (
        "from vllm.platforms import current_platform as p; "
        "print('PLATFORM', p._enum.name.lower(), repr(p.device_type))"
    )
    seen = {}
    for mode in ("mi300x", "no-gpu"):
        out = host.run(
            f"cd /tmp && PYTHONPATH=/tmp/amd_smi INSTINCT_STUB_AMDSMI_MODE={mode} "
            f'VLLM_NO_USAGE_STATS=1 {VENV}/bin/python -c "{probe}"'
        )
        assert out.rc == 0, (mode, out.stderr[-2000:])
        seen[mode] = [ln for ln in out.stdout.splitlines() if ln.startswith("PLATFORM")][-1]
    # vllm/platforms/__init__.py tests ROCm (amdsmi) before the "+cpu" of the version
    assert seen == {"mi300x": "PLATFORM rocm 'cuda'", "no-gpu": "PLATFORM cpu 'cpu'"}, seen
