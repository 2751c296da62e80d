"""The harness itself: systemd as PID 1, a real watchdog restart, a published port."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

JOURNAL_UNITS = ["wd-probe.service", "http-probe.service"]


def _wait(predicate, timeout: float, step: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(step)


def test_systemd_is_pid1_and_running(host):
    assert host.file("/proc/1/exe").linked_to.endswith("/systemd")
    state = _wait(
        lambda: host.run("systemctl is-system-running").stdout.strip() in {"running", "degraded"},
        timeout=60,
    )
    assert state, host.run("systemctl --failed --no-pager").stdout


def _nrestarts(host) -> int:
    return int(host.check_output("systemctl show -P NRestarts wd-probe.service"))


def test_watchdog_kills_and_restarts_a_stalled_service(host):
    assert host.service("wd-probe.service").is_running
    before = _nrestarts(host)
    since = host.check_output("date '+%Y-%m-%d %H:%M:%S'")
    host.run_test("touch /run/wd-probe/stall")
    assert _wait(lambda: _nrestarts(host) > before, timeout=30), "watchdog never restarted it"
    journal = host.check_output(f"journalctl -u wd-probe.service --since '{since}' --no-pager")
    assert "Watchdog timeout" in journal
    assert _wait(lambda: host.service("wd-probe.service").is_running, timeout=15)
    assert host.check_output("systemctl show -P StatusText wd-probe.service") == "pinging"


def test_http_service_reachable_from_controller_through_published_port(host):
    assert host.socket("tcp://0.0.0.0:8081").is_listening
    with urllib.request.urlopen("http://127.0.0.1:18081/", timeout=10) as response:
        assert response.status == 200
        assert b"instinct sandbox http probe" in response.read()


def test_ansible_runner_reports_the_run_events(host, ansible_run, podman_hostvars):
    """The harness drives playbooks through ansible-runner (as AWX does) and reads the events:
    a converged host reports 0 changed, and a failing task's message comes back as data."""
    scenario = Path(__file__).resolve().parents[1]
    name = host.backend.name
    run = ansible_run(scenario / "converge.yml", {name: podman_hostvars(name)})
    assert run.rc == 0, run.failure_messages()
    assert run.count("changed") == 0
    assert run.count("ok") >= 6

    failing = ansible_run(scenario / "tests" / "fail.yml", {name: podman_hostvars(name)})
    assert failing.rc != 0
    assert failing.failure_messages() == ["harness probe: expected failure"]
