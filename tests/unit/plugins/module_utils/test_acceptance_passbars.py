"""AMD's pass bars in acceptance: the collective bandwidth judgement on a recorded rccl-tests run
of an 8 x MI300X node, the all-reduce / all-to-all harness for real over gloo with two ranks,
the kernel-log scan on recorded amdgpu logs, the MEC firmware rule on a recorded rocm-smi."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.instinct.vllm.plugins.module_utils import acceptance as acc

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "galaxy.yml").is_file())
FIXTURES = ROOT / "tests" / "unit" / "fixtures"
PASSBARS = FIXTURES / "passbars"
GIB8 = 8589934592
# a venv with CPU torch on these machines; the controller's own interpreter otherwise
TORCH_PYTHONS = ("/opt/fuzz032/bin/python", sys.executable)


def runner(argv: list[str], stdin: str, env: dict[str, str]) -> tuple[int, str, str]:
    proc = subprocess.run(
        argv, input=stdin, env={**os.environ, **env}, capture_output=True, text=True, check=False
    )
    return proc.returncode, proc.stdout, proc.stderr


def read(name: str) -> str:
    return (PASSBARS / name).read_text(encoding="utf-8")


# ------------------------------------------------------------------- rccl-tests, the all-reduce bar


@pytest.fixture(scope="module")
def mi300x_allreduce() -> list[dict]:
    return acc.parse_rccl_tests(read("rccl-tests_all_reduce_perf_mi300x_8gpu_1node.txt"))


def test_rccl_tests_table_is_read_row_by_row(mi300x_allreduce: list[dict]):
    assert len(mi300x_allreduce) == 31  # 8 B .. 8 GiB, factor 2
    last = mi300x_allreduce[-1]
    assert last == {
        "size": GIB8,
        "time_us": 47617.0,
        "algbw": 180.40,
        "busbw": 315.69,
        "wrong": 0,
        "ip_busbw": 315.91,
        "ip_wrong": 0,
    }


def test_bus_bandwidth_is_rccl_tests_definition(mi300x_allreduce: list[dict]):
    # busbw = algbw * 2 (n - 1) / n on 8 GPUs, as the recorded table prints it
    last = mi300x_allreduce[-1]
    assert last["algbw"] * acc.bus_factor("all_reduce", 8) == pytest.approx(last["busbw"], 1e-3)
    assert last["algbw"] == pytest.approx(GIB8 / last["time_us"] / 1e3, 1e-3)
    assert acc.bus_factor("all_to_all", 8) == pytest.approx(7 / 8)


def test_the_recorded_healthy_node_passes_the_default_all_reduce_bar(mi300x_allreduce: list[dict]):
    default = acc.CollectiveSpec().allreduce
    assert (default.size, default.min_busbw) == (GIB8, 304.0)
    passed, reason = acc.judge(mi300x_allreduce, default)
    assert passed, reason
    assert reason == "all_reduce busbw 315.69 GB/s at 8589934592 bytes (bar 304)"


def test_a_slower_node_fails_the_bar(mi300x_allreduce: list[dict]):
    # the same run judged at ROCm/cvs' two-node figure (330 GB/s at 8 GiB)
    passed, reason = acc.judge(mi300x_allreduce, acc.Bar("all_reduce", GIB8, 330.0))
    assert not passed
    assert reason == "all_reduce busbw 315.69 GB/s at 8589934592 bytes, below 330 GB/s"


def test_wrong_elements_or_a_missing_size_fail(mi300x_allreduce: list[dict]):
    rows = [dict(r) for r in mi300x_allreduce]
    rows[3]["ip_wrong"] = 2
    passed, reason = acc.judge(rows, acc.Bar("all_reduce", GIB8, 0))
    assert not passed and reason == "all_reduce: wrong results at 64 bytes"
    passed, reason = acc.judge(mi300x_allreduce, acc.Bar("all_reduce", 3 << 30, 0))
    assert not passed and "no measurement at 3221225472 bytes" in reason


# ---------------------------------------------------------- the harness, for real, gloo, 2 ranks


def torch_python() -> str:
    for python in TORCH_PYTHONS:
        if Path(python).is_file() and runner([python, "-c", "import torch"], "", {})[0] == 0:
            return python
    pytest.skip(f"no interpreter with torch among {', '.join(TORCH_PYTHONS)}")
    return ""


@pytest.fixture(scope="module")
def gloo_burnin() -> acc.CheckResult:
    """The harness once, in the burn-in tier for one second: 2 ranks, gloo, 1 MiB."""
    spec = acc.CollectiveSpec(
        allreduce=acc.Bar("all_reduce", 1 << 20, 0.001),
        alltoall=acc.Bar("all_to_all", 1 << 20, 0.001),
        tier=acc.BURNIN,
        burnin_seconds=1,
        warmup=1,
        iters=3,
        timeout=300,
        backend="gloo",
        ranks=2,
    )
    node = acc.NodeSpec("cpu", torch_python(), "cpu")
    return acc.collectives(node, runner, spec)


def test_harness_measures_both_collectives_over_two_ranks(gloo_burnin: acc.CheckResult):
    assert gloo_burnin.status == "ok", gloo_burnin.reason
    detail = gloo_burnin.detail
    assert (detail["ranks"], detail["backend"], detail["tier"]) == (2, "gloo", "burnin")
    ops = {r["op"]: r for r in detail["rows"]}
    assert set(ops) == {"all_reduce", "all_to_all"}
    for row in ops.values():
        assert row["size"] == 1 << 20 and row["wrong"] == 0 and row["busbw"] > 0
    # two ranks: busbw = algbw for all-reduce, algbw / 2 for all-to-all (rccl-tests)
    assert ops["all_reduce"]["busbw"] == pytest.approx(ops["all_reduce"]["algbw"])
    assert ops["all_to_all"]["busbw"] == pytest.approx(ops["all_to_all"]["algbw"] / 2)
    assert gloo_burnin.reason.startswith("2 ranks over gloo: all_reduce busbw")


def test_burnin_repeats_both_collectives_and_checks_every_run(gloo_burnin: acc.CheckResult):
    runs = gloo_burnin.detail["burnin"]
    assert {r["op"] for r in runs} == {"all_reduce", "all_to_all"}
    assert all(r["wrong"] == 0 for r in runs)
    assert "all_reduce burn-in:" in gloo_burnin.reason
    assert "all_to_all burn-in:" in gloo_burnin.reason
    spec = acc.CollectiveSpec(tier=acc.BURNIN)
    broken = {**gloo_burnin.detail, "burnin": [{**runs[0], "wrong": 3}, *runs[1:]]}
    bars = acc.CollectiveSpec(
        acc.Bar("all_reduce", 1 << 20, 0), acc.Bar("all_to_all", 1 << 20, 0), tier=spec.tier
    )
    result = acc.judge_collectives(broken, bars)
    assert result.status == "failed"
    assert (
        f"{runs[0]['op']}: 1 of" in result.reason
        and "burn-in runs had wrong results" in result.reason
    )


def test_harness_result_below_a_bar_fails(gloo_burnin: acc.CheckResult):
    spec = acc.CollectiveSpec(
        acc.Bar("all_reduce", 1 << 20, 1e6), acc.Bar("all_to_all", 1 << 20, 0)
    )
    result = acc.judge_collectives(gloo_burnin.detail, spec)
    assert result.status == "failed"
    assert "below 1e+06 GB/s" in result.reason and "all_to_all busbw" not in result.reason


def test_quick_tier_runs_no_burnin_and_gpu_nodes_use_rccl():
    quick = acc.CollectiveSpec().probe_args("rocm")
    assert quick["backend"] == "nccl" and quick["burnin_seconds"] == 0
    assert quick["sizes"] == [GIB8]
    burnin = acc.CollectiveSpec(tier=acc.BURNIN, burnin_seconds=600).probe_args("rocm")
    assert burnin["burnin_seconds"] == 600 and burnin["timeout"] == 900 + 600


def test_collectives_on_a_cpu_stack_are_skipped_with_the_reason():
    result = acc.collectives(
        acc.NodeSpec("cpu", sys.executable, "cpu"), runner, acc.CollectiveSpec()
    )
    assert result.status == "skipped"
    assert result.reason == "stack 'cpu' has no GPU (device cpu)"


def test_a_single_gpu_is_a_failure_not_a_pass():
    out = {"ranks": 1, "backend": "nccl", "error": "1 GPU(s): a collective needs at least 2"}
    result = acc.judge_collectives(out, acc.CollectiveSpec())
    assert result.status == "failed" and "at least 2" in result.reason


# ------------------------------------------------------------------------------- kernel log


def test_cvs_patterns_find_the_page_fault_after_the_oversubscription_warnings():
    found = acc.scan(read("dmesg_amdgpu_oversubscribed_then_page_fault.txt"))
    assert [w["category"] for w in found["warnings"]] == ["oversubscription"] * 2
    # CVS' order: "fault " (crash) matches the page-fault line before its "fault" category does
    assert [e["category"] for e in found["errors"]] == ["crash", "fault"]
    assert "no-retry page fault" in found["errors"][0]["line"]
    assert "PROTECTION_FAULT_STATUS" in found["errors"][1]["line"]
    result = acc.judge_kernel_log(read("dmesg_amdgpu_oversubscribed_then_page_fault.txt"), "0")
    assert result.status == "failed"
    assert "(crash, fault)" in result.reason


def test_oversubscription_alone_is_a_warning_not_a_failure():
    text = "".join(read("dmesg_amdgpu_oversubscribed_then_page_fault.txt").splitlines(True)[:2])
    result = acc.judge_kernel_log(text, "1764660000")
    assert result.status == "ok"
    assert result.reason.startswith("no failure pattern in 2 kernel log line(s) since 1764660000;")
    assert "2 warning(s)" in result.reason


def test_a_gpu_reset_fails_with_its_categories():
    result = acc.judge_kernel_log(read("dmesg_amdgpu_fence_timeout_gpu_reset.txt"), "0")
    assert result.status == "failed"
    categories = {e["category"] for e in result.detail["errors"]}
    assert categories == {"gpu_reset", "driver"}
    resets = [e["line"] for e in result.detail["errors"] if e["category"] == "gpu_reset"]
    assert any(line.endswith("amdgpu: GPU reset begin!") for line in resets), resets
    assert "qcm fence wait loop timeout expired" in result.reason


def test_kernel_log_reads_the_journal_since_the_start():
    seen = []

    def journal(argv: list[str], stdin: str, env: dict[str, str]) -> tuple[int, str, str]:
        seen.append(argv)
        return 0, "2026-12-02T07:00:00+0000 node kernel: amdgpu: GPU reset begin!\n", ""

    result = acc.kernel_log(journal, "1764658800")
    assert seen == [
        ["journalctl", "-k", "--no-pager", "-q", "-o", "short-iso", "--since", "@1764658800"]
    ]
    assert result.status == "failed"
    error = acc.kernel_log(lambda *a: (1, "", "No journal files were found."), "0")
    assert error.status == "error" and "No journal files" in error.reason


# ---------------------------------------------------------------------------------- firmware


@pytest.fixture(scope="module")
def rocm_smi_a() -> str:
    return (FIXTURES / "instinct" / "rocm-smi_-a_mi300x_4gpu.txt").read_text(encoding="utf-8")


def test_mec_versions_per_gpu_not_mec2(rocm_smi_a: str):
    assert acc.mec_versions(rocm_smi_a) == {0: 138, 1: 138, 2: 138, 3: 138}


def test_mec_below_177_needs_hsa_no_scratch_reclaim(rocm_smi_a: str):
    result = acc.judge_firmware(rocm_smi_a, {})
    assert result.status == "failed"
    assert result.reason.startswith("MEC firmware 138 below 177 on GPU(s) [0, 1, 2, 3]")
    assert "HSA_NO_SCRATCH_RECLAIM=1" in result.reason
    assert acc.judge_firmware(rocm_smi_a, {"HSA_NO_SCRATCH_RECLAIM": "1"}).status == "ok"


def test_new_enough_mec_needs_nothing(rocm_smi_a: str):
    newer = rocm_smi_a.replace("MEC firmware version: \t138", "MEC firmware version: \t177")
    result = acc.judge_firmware(newer, {})
    assert result.status == "ok" and result.reason == "MEC firmware 177 >= 177 on every GPU"


def test_unreadable_mec_is_treated_as_old():
    assert acc.judge_firmware("", {}).status == "failed"
    assert acc.judge_firmware("", {"HSA_NO_SCRATCH_RECLAIM": "1"}).status == "ok"


def test_firmware_runs_rocm_smi_and_skips_without_gpu(rocm_smi_a: str):
    calls = []

    def smi(argv: list[str], stdin: str, env: dict[str, str]) -> tuple[int, str, str]:
        calls.append(argv)
        return 0, rocm_smi_a, ""

    assert acc.firmware(smi, {}).status == "failed"
    assert calls == [["/opt/rocm/bin/rocm-smi", "--showfw"]]
    skipped = acc.firmware(smi, {}, skip_reason="stack 'cpu' has no GPU (device cpu)")
    assert skipped.status == "skipped" and len(calls) == 1
