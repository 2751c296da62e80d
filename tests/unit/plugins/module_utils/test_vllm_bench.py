"""module_utils/vllm_bench.py: entry point, argv, environment, the sweep (with a fake runner
that writes what the benchmark would)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ansible_collections.instinct.vllm.plugins.module_utils import vllm_bench as vb

KEY = "bench-unit-key-3e8c1f20a9"
TARGET = vb.Target("node-1", "http://127.0.0.1:8000/", "demo", "/srv/models/demo")
WORK = vb.Workload(8, 4, (1, 2), (4, 4))


@pytest.mark.parametrize(
    ("version", "entry"),
    [("0.6.6.post1", "legacy"), ("0.6.6.post1+rocm621", "legacy"), ("0.9.2", "legacy"),
     ("0.10.1.1", "cli"), ("0.32.0+cpu", "cli")],
)  # fmt: skip
def test_entry_point_by_version(version: str, entry: str) -> None:
    assert vb.choose_entry_point("auto", version) == entry
    assert vb.choose_entry_point("legacy", "0.32.0") == "legacy"
    with pytest.raises(vb.BenchError, match="entry_point"):
        vb.choose_entry_point("bogus", version)


def test_cli_argv_has_no_secret_and_the_workload() -> None:
    argv = vb.bench_argv("cli", "/opt/vllm/venv", "", TARGET, WORK, 2, 4, "/r")
    assert argv[:3] == ["/opt/vllm/venv/bin/vllm", "bench", "serve"]
    joined = " ".join(argv)
    parts = (
        "--base-url http://127.0.0.1:8000 ", "--dataset-name random", "--random-input-len 8",
        "--random-output-len 4", "--max-concurrency 2", "--num-prompts 4",
        "--tokenizer /srv/models/demo", "--result-filename node-1-c2.json",
        "--metric-percentiles 50,90,99", "--ignore-eos", "--ready-check-timeout-sec 0",
    )  # fmt: skip
    for part in parts:
        assert part in joined, part
    assert KEY not in joined and "api-key" not in joined


def test_legacy_argv_runs_the_script() -> None:
    argv = vb.bench_argv("legacy", "/v", "/b/benchmark_serving.py", TARGET, WORK, 1, 4, "/r")
    assert argv[:2] == ["/v/bin/python", "/b/benchmark_serving.py"]
    assert "--ready-check-timeout-sec" not in argv  # 0.6.x has no such flag
    with pytest.raises(vb.BenchError, match=r"benchmark_serving\.py"):
        vb.bench_argv("legacy", "/v", "", TARGET, WORK, 1, 4, "/r")


def test_env_carries_the_key_and_the_shim() -> None:
    env = vb.bench_env({"PATH": "/usr/bin", "PYTHONPATH": "/lib"}, KEY, "/shim")
    assert env["OPENAI_API_KEY"] == KEY and env["PYTHONPATH"] == f"/shim{os.pathsep}/lib"
    assert env["HF_HUB_OFFLINE"] == "1"
    assert "PYTHONPATH" not in vb.bench_env({}, KEY, None)  # write_shims wrote nothing


def test_write_shims_writes_what_the_run_needs(tmp_path: Path) -> None:
    shim = tmp_path / "shim"
    assert vb.write_shims(str(shim), datasets=True, tls=False) == str(shim)
    assert sorted(p.name for p in shim.iterdir()) == ["datasets.py"]
    assert vb.write_shims(str(shim), datasets=False, tls=True) == str(shim)
    assert (shim / "sitecustomize.py").read_text(encoding="utf-8") == vb.TLS_SHIM


def test_datasets_shim_refuses_hf_datasets(tmp_path: Path) -> None:
    namespace: dict = {}
    exec(compile(vb.DATASETS_SHIM, "datasets.py", "exec"), namespace)
    with pytest.raises(RuntimeError, match="random"):
        namespace["load_dataset"]("sharegpt")


def test_num_prompts_for() -> None:
    assert vb.num_prompts_for([1, 8, 32], 4, 16) == [16, 32, 128]


def _fake_runner(writes: bool = True, rc: int = 0):
    def run(argv, env, log, timeout):
        assert env["OPENAI_API_KEY"] == KEY
        log.write("benchmark output\n")
        if writes:
            out = (
                Path(argv[argv.index("--result-dir") + 1])
                / argv[argv.index("--result-filename") + 1]
            )
            conc = int(argv[argv.index("--max-concurrency") + 1])
            out.write_text(json.dumps({"completed": 4, "output_throughput": 10.0 * conc,
                                       "p99_ttft_ms": 5.0}), encoding="utf-8")  # fmt: skip
        return rc

    return run


def test_sweep_runs_every_level_and_logs_progress(tmp_path: Path) -> None:
    log = tmp_path / "bench.log"
    env = vb.bench_env({}, KEY, None)
    runs = vb.run_sweep("cli", "/v", "", TARGET, WORK, str(tmp_path / "r"), str(log), env, 60,
                        runner=_fake_runner())  # fmt: skip
    assert [r.concurrency for r in runs] == [1, 2]
    assert runs[1].summary["output_throughput"] == 20.0
    text = log.read_text(encoding="utf-8")
    assert "concurrency 1 (1/2)" in text and "concurrency 2 (2/2)" in text and "=== done in" in text


def test_sweep_stops_at_a_failed_level(tmp_path: Path) -> None:
    env = vb.bench_env({}, KEY, None)
    with pytest.raises(vb.BenchError, match="concurrency 1: the benchmark exited 1"):
        vb.run_sweep("cli", "/v", "", TARGET, WORK, str(tmp_path / "r"), str(tmp_path / "l"),
                     env, 60, runner=_fake_runner(rc=1))  # fmt: skip
    with pytest.raises(vb.BenchError, match="without a result file"):
        vb.run_sweep("cli", "/v", "", TARGET, WORK, str(tmp_path / "r2"), str(tmp_path / "l"),
                     env, 60, runner=_fake_runner(writes=False))  # fmt: skip


# --- the entry point, decided here once (the role only asks: plan) ----------------------------


class _Probe:
    """Stands in for subprocess.run: the venv's python printing a version (or failing)."""

    def __init__(self, stdout: str, rc: int = 0, stderr: str = "") -> None:
        self.stdout, self.returncode, self.stderr = stdout, rc, stderr
        self.argv: list[str] = []

    def __call__(self, argv: list[str], **_kwargs: object) -> _Probe:
        self.argv = argv
        return self


@pytest.mark.parametrize(("printed", "entry"), [("0.6.6.post1\n", "legacy"),
                                                ("0.32.0+cpu\n", "cli"), ("0.10.1", "cli")])
def test_plan_reads_the_installed_version_and_picks_the_entry_point(printed: str,
                                                                    entry: str) -> None:
    probe = _Probe(printed)
    assert vb.plan("auto", "", "/opt/v", probe) == (entry, printed.strip())
    assert probe.argv[:2] == ["/opt/v/bin/python", "-c"] and "version('vllm')" in probe.argv[2]


def test_plan_uses_a_given_version_without_asking_the_venv() -> None:
    def never(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the venv was asked")

    assert vb.plan("auto", "0.9.2", "/opt/v", never) == ("legacy", "0.9.2")
    assert vb.plan("cli", "0.6.6", "/opt/v", never) == ("cli", "0.6.6")


def test_plan_fails_naming_the_venv_without_vllm() -> None:
    with pytest.raises(vb.BenchError, match="/opt/v: vLLM is not installed there"):
        vb.plan("auto", "", "/opt/v", _Probe("", 1, "PackageNotFoundError: vllm"))
