"""_vllm_build/build.py: build key, MAX_JOBS, archs, environment, requirements, logs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.instinct.vllm.plugins.module_utils._gpu_facts.rocm import parse_rocminfo
from ansible_collections.instinct.vllm.plugins.module_utils._vllm_build import build as vb
from ansible_collections.instinct.vllm.plugins.plugin_utils.stack_matrix import (
    default_matrix_path,
)

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "instinct"
ROOT = Path(__file__).resolve().parents[4]
GIB_KB = 1024 * 1024


def stack(name: str = "rocm-6.2.1") -> dict:
    return yaml.safe_load(default_matrix_path().read_text())["stacks"][name]


def meminfo(available_gib: float) -> str:
    kb = int(available_gib * GIB_KB)
    return (
        f"MemTotal:       {kb * 2} kB\nMemFree:        {kb // 2} kB\n"
        f"MemAvailable:   {kb} kB\nBuffers:        1024 kB\n"
    )


def mi300x_recorded() -> tuple[list[str], int, int]:
    """Archs, CPUs and system memory of the recorded 8x MI300X host (Xeon 8470 x2)."""
    info = parse_rocminfo((FIX / "rocminfo_mi300x_8gpu_xeon8470.txt").read_text())
    archs = sorted({a["arch"] for a in info["gpu_agents"]})
    env_text = (FIX / "vllm_collect_env_mi300x_8gpu_rocm6.2.txt").read_text()
    cpus = int(re.search(r"^CPU\(s\):\s+(\d+)", env_text, re.M).group(1))
    # rocminfo's CPU agents: one global pool per NUMA node, sizes in KB.
    raw = (FIX / "rocminfo_mi300x_8gpu_xeon8470.txt").read_text()
    cpu_blocks = [b for b in raw.split("*******") if re.search(r"Device Type:\s+CPU", b)]
    pool_kb = [int(re.search(r"^\s+Size:\s+(\d+)\(", b, re.M).group(1)) for b in cpu_blocks]
    assert len(pool_kb) == 2  # two sockets / NUMA nodes
    return archs, cpus, sum(pool_kb) * 1024


# --- the ROCm build environment, from the recorded MI300X facts ---------------------------------


def test_rocm_env_from_recorded_mi300x_facts() -> None:
    archs_found, cpus, mem = mi300x_recorded()
    assert archs_found == ["gfx942"] and cpus == 208
    s = stack()
    src = vb.check_source(s["vllm"]["source"])
    archs, origin = vb.resolve_archs("", archs_found, s["gpu_archs"], src["target_device"])
    jobs, reason = vb.max_jobs(cpus, mem, 8)
    env = vb.build_env(src["target_device"], archs, jobs, "/opt/vllm/venv", s["rocm"]["path"])
    assert origin == "gpu_facts"
    assert env == {
        "VLLM_TARGET_DEVICE": "rocm",
        "PYTORCH_ROCM_ARCH": "gfx942",
        "MAX_JOBS": "208",
        "ROCM_PATH": "/opt/rocm-6.2.1",
        "HIP_PATH": "/opt/rocm-6.2.1",
        "PATH": "/opt/vllm/venv/bin:/opt/rocm-6.2.1/bin:"
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    }
    assert reason.endswith("-> cores")


def test_rocm_env_same_host_with_less_free_memory_is_capped_by_memory() -> None:
    _archs, cpus, _mem = mi300x_recorded()
    # Same 208-CPU host while 300 GiB are free: 300 // 8 = 37 jobs, not 208.
    jobs, reason = vb.max_jobs(cpus, vb.parse_meminfo(meminfo(300)), 8)
    assert jobs == 37 and reason.endswith("-> memory")


def test_arch_feature_suffix_from_collect_env_is_reduced() -> None:
    text = (FIX / "vllm_collect_env_mi300x_8gpu_rocm6.2.txt").read_text()
    arch = re.search(r"\((gfx[^)]+)\)", text).group(1)
    assert arch == "gfx942:sramecc+:xnack-"
    assert vb.resolve_archs(None, [arch], ["gfx942"], "rocm")[0] == ["gfx942"]


# --- MAX_JOBS -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cores", "avail_gib", "per_job", "override", "expected"),
    [
        (2, 20, 8, 0, 2),  # this sandbox: cores limit
        (64, 100, 8, 0, 12),  # memory limits: 100 // 8
        (64, 5, 8, 0, 1),  # never below 1
        (64, 100, 8, 3, 3),  # override wins
        (16, 64, 2.5, 0, 16),
        (32, 64, 2.5, 0, 25),  # 64 GiB // 2.5 GiB
    ],
)
def test_max_jobs(
    cores: int, avail_gib: float, per_job: float, override: int, expected: int
) -> None:
    assert vb.max_jobs(cores, int(avail_gib * 1024**3), per_job, override)[0] == expected


def test_max_jobs_rejects_zero_per_job() -> None:
    with pytest.raises(vb.BuildInputError, match="vllm_source_gib_per_job"):
        vb.max_jobs(4, 1024**3, 0)


def test_parse_meminfo_prefers_memavailable() -> None:
    assert vb.parse_meminfo(meminfo(10)) == 10 * 1024**3
    assert vb.parse_meminfo("MemTotal: 100 kB\nMemFree: 50 kB\n") == 50 * 1024
    with pytest.raises(vb.BuildInputError):
        vb.parse_meminfo("nothing here\n")


# --- archs --------------------------------------------------------------------------------------


def test_archs_override_wins_and_is_split() -> None:
    archs, origin = vb.resolve_archs("gfx90a;gfx942", ["gfx942"], ["gfx942", "gfx90a"], "rocm")
    assert archs == ["gfx90a", "gfx942"] and origin == "vllm_source_pytorch_rocm_arch"


def test_archs_fall_back_to_the_stack() -> None:
    assert vb.resolve_archs("", [], ["gfx942", "gfx90a"], "rocm") == (
        ["gfx942", "gfx90a"],
        "stack gpu_archs",
    )


def test_arch_outside_the_stack_fails_naming_the_variable() -> None:
    with pytest.raises(vb.BuildInputError, match="gfx1100 not in the stack's gpu_archs"):
        vb.resolve_archs("", ["gfx1100"], ["gfx942"], "rocm")
    with pytest.raises(vb.BuildInputError, match="vllm_source_pytorch_rocm_arch"):
        vb.resolve_archs("sm_90", [], ["gfx942"], "rocm")


def test_no_gpu_target_needs_no_arch_and_exports_no_rocm_vars() -> None:
    archs, _origin = vb.resolve_archs("", [], [], "empty")
    env = vb.build_env("empty", archs, 2, "/opt/vllm/venv", None)
    assert env["VLLM_TARGET_DEVICE"] == "empty" and env["MAX_JOBS"] == "2"
    assert not {"PYTORCH_ROCM_ARCH", "ROCM_PATH", "HIP_PATH"} & set(env)


def test_extra_env_cannot_override_managed_vars() -> None:
    with pytest.raises(vb.BuildInputError, match="MAX_JOBS"):
        vb.build_env("empty", [], 1, "/v", None, {"MAX_JOBS": "99"})
    assert (
        vb.build_env("empty", [], 1, "/v", None, {"CMAKE_BUILD_TYPE": "Release"})[
            "CMAKE_BUILD_TYPE"
        ]
        == "Release"
    )


# --- source block -------------------------------------------------------------------------------


def test_default_stack_source_block_is_valid() -> None:
    src = vb.check_source(stack()["vllm"]["source"])
    assert src["target_device"] == "rocm"
    assert src["url"].endswith("/vllm-0.6.6.post1.tar.gz")
    assert (ROOT / "files" / "patches" / "vllm" / src["patches"] / "series").is_file()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sha256": "ABC"}, r"vllm.source.sha256"),
        ({"url": "ftp://x/y.tar.gz"}, r"vllm.source.url"),
        ({"target_device": "cuda"}, r"vllm.source.target_device"),
        ({"subdir": ""}, r"vllm.source.subdir"),
        ({"runtime_requirements": "requirements-rocm.txt"}, r"runtime_requirements"),
    ],
)
def test_bad_source_block_fails_naming_the_key(change: dict, message: str) -> None:
    src = dict(stack()["vllm"]["source"], **change)
    with pytest.raises(vb.BuildInputError, match=message):
        vb.check_source(src)


def test_missing_source_block() -> None:
    with pytest.raises(vb.BuildInputError, match="no source block"):
        vb.check_source(None)


# --- build key ----------------------------------------------------------------------------------


def _inputs(**over: object) -> dict:
    s = stack()
    args = {
        "vllm_version": "0.6.6.post1",
        "source": s["vllm"]["source"],
        "patches": [{"name": "0001-a.patch", "sha256": "1" * 64}],
        "torch_version": "2.5.1",
        "torch_index": s["torch"]["index_url"],
        "rocm_version": "6.2.1",
        "archs": ["gfx942"],
        "extra_env": {},
    }
    args.update(over)
    return vb.key_inputs(**args)


def test_build_key_is_stable_and_short() -> None:
    assert vb.build_key(_inputs()) == vb.build_key(_inputs())
    assert re.fullmatch(r"[0-9a-f]{16}", vb.build_key(_inputs()))


@pytest.mark.parametrize(
    "change",
    [
        {"vllm_version": "0.6.6"},
        {"patches": [{"name": "0001-a.patch", "sha256": "2" * 64}]},
        {"patches": []},
        {"torch_version": "2.5.0"},
        {"rocm_version": "6.2.4"},
        {"archs": ["gfx942", "gfx90a"]},
        {"extra_env": {"CMAKE_BUILD_TYPE": "Debug"}},
    ],
)
def test_every_input_changes_the_key(change: dict) -> None:
    assert vb.build_key(_inputs(**change)) != vb.build_key(_inputs())


def test_archs_and_rocm_do_not_matter_for_a_no_gpu_target() -> None:
    src = dict(stack()["vllm"]["source"], target_device="empty")
    a = _inputs(source=src, archs=["gfx942"], rocm_version="6.2.1")
    b = _inputs(source=src, archs=[], rocm_version=None)
    assert vb.build_key(a) == vb.build_key(b)


def test_read_stamp(tmp_path: Path) -> None:
    assert vb.read_stamp(tmp_path / "none.json") is None
    (tmp_path / "bad.json").write_text("{nope")
    assert vb.read_stamp(tmp_path / "bad.json") is None
    (tmp_path / "ok.json").write_text(json.dumps({"key": "abc"}))
    assert vb.read_stamp(tmp_path / "ok.json") == {"key": "abc"}


# --- requirements -------------------------------------------------------------------------------


def test_requirements_follow_includes_and_drop_torch(tmp_path: Path) -> None:
    (tmp_path / "requirements-common.txt").write_text(
        "# common\npsutil\nnumpy < 2.0.0\ntransformers >= 4.45.2  # Llama 3.2\n"
    )
    (tmp_path / "requirements-rocm.txt").write_text(
        "-r requirements-common.txt\n--extra-index-url https://x\nray >= 2.10.0\npsutil\n"
    )
    (tmp_path / "requirements-build.txt").write_text(
        "cmake>=3.26,<4\nninja\ntorch==2.5.1\nTorch_Something==1\nwheel\n"
    )
    assert vb.requirements_from(tmp_path, ["requirements-rocm.txt"]) == [
        "psutil",
        "numpy < 2.0.0",
        "transformers >= 4.45.2",
        "ray >= 2.10.0",
    ]
    assert vb.requirements_from(tmp_path, ["requirements-build.txt"]) == [
        "cmake>=3.26,<4",
        "ninja",
        "Torch_Something==1",
        "wheel",
    ]


def test_requirements_missing_file_and_loop(tmp_path: Path) -> None:
    with pytest.raises(vb.BuildInputError, match="cannot read"):
        vb.requirements_from(tmp_path, ["nope.txt"])
    (tmp_path / "a.txt").write_text("-r b.txt\n")
    (tmp_path / "b.txt").write_text("-r a.txt\n")
    with pytest.raises(vb.BuildInputError, match="loop"):
        vb.requirements_from(tmp_path, ["a.txt"])


# --- log classification (the recorded logs: test_build_log.py) -------------------------------


def test_classify_more_missing_dependencies() -> None:
    cases = {
        "ModuleNotFoundError: No module named 'setuptools_scm'": "build_missing_dependency",
        "csrc/ops.h:3:10: fatal error: 'hip/hip_runtime.h' file not found": (
            "build_missing_dependency"
        ),
        "CMake Error at CMakeLists.txt:1 (cmake_minimum_required):\n"
        "  Compatibility with CMake < 3.5 has been removed from CMake.": (
            "build_missing_dependency"
        ),
        "csrc/ops.hip:1:10: fatal error: 'string' file not found": "build_cxx_headers_missing",
    }
    for log, cls in cases.items():
        assert vb.failure(log, 1, "dist").cls == cls, log


# --- running a build ----------------------------------------------------------------------------


def _fake_source(tmp_path: Path, body: str) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "setup.py").write_text(body)
    return src


def test_run_build_success_returns_the_wheel_and_its_sha256(tmp_path: Path) -> None:
    src = _fake_source(
        tmp_path,
        "import os, sys, pathlib\n"
        "d = pathlib.Path(sys.argv[sys.argv.index('--dist-dir') + 1])\n"
        "print('MAX_JOBS', os.environ['MAX_JOBS'])\n"
        "(d / 'vllm-0.6.6.post1+empty-py3-none-any.whl').write_bytes(b'wheel')\n",
    )
    out = vb.run_build(
        str(src), sys.executable, {"MAX_JOBS": "3"}, str(tmp_path / "b.log"), str(tmp_path / "dist")
    )
    assert out["rc"] == 0 and out["wheel"].endswith("+empty-py3-none-any.whl")
    assert out["sha256"] == vb.sha256_file(out["wheel"])
    assert "MAX_JOBS 3" in (tmp_path / "b.log").read_text()


def test_run_build_failure_is_classified_with_the_tail(tmp_path: Path) -> None:
    src = _fake_source(
        tmp_path,
        "import sys\n"
        "print('[1/9] Building HIP object csrc/x.hip.o')\n"
        "print('clang++: error: unable to execute command: Killed', file=sys.stderr)\n"
        "sys.exit(1)\n",
    )
    out = vb.run_build(
        str(src), sys.executable, {}, str(tmp_path / "b.log"), str(tmp_path / "dist")
    )
    assert out["rc"] == 1 and out["category"] == "build_oom_kill"
    assert out["tail"][-1] == "clang++: error: unable to execute command: Killed"


def test_run_build_killed_by_sigkill_is_an_oom_kill(tmp_path: Path) -> None:
    src = _fake_source(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    out = vb.run_build(
        str(src), sys.executable, {}, str(tmp_path / "b.log"), str(tmp_path / "dist")
    )
    assert out["category"] == "build_oom_kill" and out["rc"] == -9
    assert out["evidence"] == "setup.py was killed by signal 9 (rc -9)"


def test_run_build_without_a_wheel_is_unknown_whatever_the_log(tmp_path: Path) -> None:
    src = _fake_source(tmp_path, "print('clang++: error: unable to execute command: Killed')\n")
    out = vb.run_build(
        str(src), sys.executable, {}, str(tmp_path / "b.log"), str(tmp_path / "dist")
    )
    assert (out["rc"], out["category"]) == (1, "unknown")
    assert out["evidence"].startswith("setup.py succeeded but left no vllm-*.whl")


# --- the module, run the way Ansible runs it --------------------------------------------------


def test_module_vllm_build_env_runs_on_this_host(tmp_path: Path) -> None:
    """The module end to end (args file, recorded MI300X archs, a fixed meminfo)."""
    (tmp_path / "meminfo").write_text(meminfo(64))
    args = {
        "ANSIBLE_MODULE_ARGS": {
            "source": stack()["vllm"]["source"],
            "vllm_version": "0.6.6.post1",
            "torch_version": "2.5.1",
            "rocm_version": "6.2.1",
            "rocm_path": "/opt/rocm-6.2.1",
            "stack_archs": ["gfx942", "gfx90a"],
            "facts_archs": ["gfx942"],
            "venv": "/opt/vllm/venv",
            "stamp_path": str(tmp_path / "stamp.json"),
            "meminfo_path": str(tmp_path / "meminfo"),
        }
    }
    (tmp_path / "args.json").write_text(json.dumps(args))
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "plugins" / "modules" / "vllm_build_env.py"),
            str(tmp_path / "args.json"),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(ROOT / ".collections"), "PATH": "/usr/bin:/bin"},
    )
    out = json.loads(proc.stdout)
    assert not out.get("failed"), out
    import os

    cores = len(os.sched_getaffinity(0))
    assert out["env"]["PYTORCH_ROCM_ARCH"] == "gfx942"
    assert out["max_jobs"] == min(cores, 8) and out["stamp_matches"] is False
    (tmp_path / "stamp.json").write_text(json.dumps({"key": out["key"]}))
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "plugins" / "modules" / "vllm_build_env.py"),
            str(tmp_path / "args.json"),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(ROOT / ".collections"), "PATH": "/usr/bin:/bin"},
    )
    assert json.loads(proc.stdout)["stamp_matches"] is True
