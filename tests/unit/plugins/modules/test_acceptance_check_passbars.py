"""The module instinct.vllm.acceptance_check, pass-bar checks: firmware through a stand-in
rocm-smi that prints a recorded MI300X output, kernel_log through a stand-in journalctl that
prints a recorded amdgpu log, and the collective bars built from the module's options."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.instinct.vllm.plugins.modules import acceptance_check

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "galaxy.yml").is_file())
FIXTURES = ROOT / "tests" / "unit" / "fixtures"
ROCM_SMI_A = FIXTURES / "instinct" / "rocm-smi_-a_mi300x_4gpu.txt"
PAGE_FAULT = FIXTURES / "passbars" / "dmesg_amdgpu_oversubscribed_then_page_fault.txt"

REPLAY = """#!{python}
# prints a recorded output and logs its argv to {log}
import sys
with open({log!r}, "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
sys.stdout.write(open({fixture!r}).read())
"""


def replay(bin_dir: Path, name: str, fixture: Path) -> Path:
    bin_dir.mkdir(exist_ok=True)
    program = bin_dir / name
    log = bin_dir / f"{name}.calls"
    program.write_text(REPLAY.format(python=sys.executable, log=str(log), fixture=str(fixture)))
    program.chmod(0o755)
    return program


def run_check(capsys: pytest.CaptureFixture[str], **args: object) -> dict:
    params = {"device": "rocm", "stack": "rocm-6.2.1", "python": sys.executable, **args}
    with patch_module_args(params), pytest.raises(SystemExit):
        acceptance_check.main()
    return json.loads(capsys.readouterr().out)["result"]


def test_firmware_below_177_without_the_variable_fails(tmp_path, capsys):
    smi = replay(tmp_path / "bin", "rocm-smi", ROCM_SMI_A)
    result = run_check(capsys, check="firmware", rocm_smi=str(smi))
    assert result["status"] == "failed"
    assert result["reason"].startswith("MEC firmware 138 below 177")
    assert (tmp_path / "bin" / "rocm-smi.calls").read_text() == "--showfw\n"
    fixed = run_check(
        capsys,
        check="firmware",
        rocm_smi=str(smi),
        environment={"HSA_NO_SCRATCH_RECLAIM": "1"},
    )
    assert fixed["status"] == "ok", fixed["reason"]


def test_kernel_log_reads_the_window_and_fails_on_a_page_fault(tmp_path, monkeypatch, capsys):
    replay(tmp_path / "bin", "journalctl", PAGE_FAULT)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    result = run_check(capsys, check="kernel_log", since="1764658800")
    assert result["status"] == "failed"
    assert "no-retry page fault" in result["reason"]
    calls = (tmp_path / "bin" / "journalctl.calls").read_text()
    assert calls == "-k --no-pager -q -o short-iso --since @1764658800\n"


def test_gpu_pass_bars_skip_on_a_cpu_stack(capsys):
    for check in ("collectives", "firmware", "kernel_log"):
        result = run_check(capsys, check=check, device="cpu", stack="cpu")
        assert result["status"] == "skipped", check
        assert result["reason"] == "stack 'cpu' has no GPU (device cpu)"


def test_collective_bars_and_tier_come_from_the_options():
    params = {
        "allreduce_bytes": 1 << 30,
        "allreduce_min_busbw": 250.0,
        "alltoall_bytes": 1 << 28,
        "alltoall_min_busbw": 0.0,
        "tier": "burnin",
        "burnin_seconds": 1800.0,
        "collective_iters": 50,
        "collective_timeout": 600.0,
    }
    spec = acceptance_check.collective_spec(params)
    assert (spec.allreduce.op, spec.allreduce.size, spec.allreduce.min_busbw) == (
        "all_reduce",
        1 << 30,
        250.0,
    )
    assert (spec.alltoall.size, spec.alltoall.min_busbw) == (1 << 28, 0.0)
    args = spec.probe_args("rocm")
    assert args["sizes"] == [1 << 28, 1 << 30] and args["burnin_size"] == 1 << 30
    assert (args["iters"], args["burnin_seconds"], args["timeout"]) == (50, 1800.0, 2400.0)
