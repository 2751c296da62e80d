"""The harness itself: systemd as PID 1, a real watchdog restart, a published port."""

from __future__ import annotations

import time
import urllib.request

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
