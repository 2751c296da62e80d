"""serving scenario: one SIGSTOP of the engine for the two tests that watch what follows it.

The engine stays stopped until the watchdog restarts the unit. Meanwhile Prometheus on the
node fires VllmEngineDown (test_monitoring.py), and the watchdog restarts the unit
(test_serving.py); then the node serves again, the alert resolves and VllmServiceRestarted
fires. Both tests read the one record of it; whichever runs first makes it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pytest
import testinfra

NODE = "serving-node"
# Bounds for a loaded shared 2-core machine, not performance claims. Expected: the alert
# fires ~20 s after SIGSTOP (scrape 3 s, `for` 9 s); the watchdog acts within ~36 s (two polls,
# WatchdogSec 20 s, RestartSec 2 s).
ALERT_WITHIN = 150.0
RESTART_WITHIN = 240.0
SERVING_WITHIN = 600.0  # = TimeoutStartSec: a reload on a loaded machine is slow


@dataclass
class SigstopCycle:
    """What one SIGSTOP of the engine led to (seconds after the SIGSTOP; None: not seen)."""

    engine: str
    main_pid: str
    restarts: int
    firing_before: list[dict]
    stopped_at: int = 0  # the node's clock (epoch seconds) just before the SIGSTOP
    alerts: list[dict] = field(default_factory=list)
    fired_after: float | None = None
    restarted_after: float | None = None
    journal: str = ""
    serving_after: float | None = None
    active: bool = False
    main_pid_after: str = ""
    resolved: bool = False
    restarted_alert: list[dict] = field(default_factory=list)


def _until(check, timeout: float, step: float):
    """check()'s first truthy value within timeout seconds, else None."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        value = check()
        if value:
            return value
        time.sleep(step)
    return None


def _stopped(host, cycle: SigstopCycle, firing) -> None:
    """Poll both sides while the engine is stopped: the alert and the unit's restart."""
    from test_serving import prop

    stopped = time.monotonic()
    while time.monotonic() - stopped < RESTART_WITHIN:
        elapsed = time.monotonic() - stopped
        if cycle.fired_after is None and elapsed < ALERT_WITHIN:
            alerts = firing(host, "VllmEngineDown")
            if alerts:
                cycle.alerts, cycle.fired_after = alerts, elapsed
        if cycle.restarted_after is None and int(prop(host, "NRestarts")) != cycle.restarts:
            cycle.restarted_after = elapsed
        if cycle.restarted_after is not None and (cycle.fired_after is not None
                                                  or elapsed >= ALERT_WITHIN):
            return
        time.sleep(1)


def _back(host, cycle: SigstopCycle, firing) -> None:
    """After the restart: serving again, active, the alert resolved, the restart alerted."""
    from test_serving import journal_since, prop, wait_serving

    # Everything the unit logged since the SIGSTOP (the restarted engine's own lines included:
    # a fixed line count would lose the watchdog's when the alert's wait outlasts the restart).
    cycle.journal = journal_since(host, cycle.stopped_at)
    try:
        cycle.serving_after = wait_serving(SERVING_WITHIN)
    except AssertionError:
        return
    # The API answers a poll or two before the wrapper sends READY=1 (its own poll interval):
    # until then systemd says "activating".
    cycle.active = bool(_until(lambda: prop(host, "ActiveState") == "active", 120, 2))
    cycle.main_pid_after = prop(host, "MainPID")
    cycle.resolved = bool(_until(lambda: not firing(host, "VllmEngineDown"), 600, 3))
    cycle.restarted_alert = _until(lambda: firing(host, "VllmServiceRestarted"), 120, 3) or []


@pytest.fixture(scope="session")
def sigstop_cycle() -> SigstopCycle:
    """SIGSTOP the engine (the wrapper's oldest child) and record what follows until the node
    serves again. The engine gets SIGCONT at the end if it is still there (a failed restart)."""
    from test_monitoring import firing, query, wait_for
    from test_serving import prop

    host = testinfra.get_host(f"sandbox://{NODE}")
    wait_for("vllm target up", lambda: [s for s in query(host, 'up{job="vllm"}')
                                        if s["value"][1] == "1"], 60)
    main_pid = prop(host, "MainPID")
    engine = host.check_output(f"pgrep -P {main_pid} -o").strip()
    assert engine, "no engine child under the wrapper"
    cycle = SigstopCycle(engine=engine, main_pid=main_pid,
                         restarts=int(prop(host, "NRestarts")),
                         firing_before=firing(host, "VllmEngineDown"))
    cycle.stopped_at = int(host.check_output("date +%s"))
    host.check_output(f"kill -STOP {engine}")
    try:
        _stopped(host, cycle, firing)
    finally:
        host.run(f"kill -CONT {engine}")
    if cycle.restarted_after is not None:
        _back(host, cycle, firing)
    return cycle
