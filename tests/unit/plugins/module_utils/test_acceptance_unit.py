"""module_utils/_acceptance/unit.py: what the serve check does for each state of the vLLM unit
(systemd's LoadState, ActiveState, SubState and Result), and the wait for an activating one."""

from __future__ import annotations

import pytest
from ansible_collections.instinct.vllm.plugins.module_utils import acceptance as acc

BOUND = 3600.0


def unit(active: str, sub: str, result: str = "success", load: str = "loaded") -> acc.UnitState:
    return acc.UnitState(load=load, active=active, sub=sub, result=result)


def decide(state: acc.UnitState, mode: str = "auto", elapsed: float = 0.0) -> acc.Decision:
    return acc.decide(mode, "vllm", state, elapsed, BOUND)


# ------------------------------------------------------------------------------ decide


def test_active_uses_the_service():
    for mode in ("auto", "service"):
        assert decide(unit("active", "running"), mode) == acc.Decision(
            acc.USE_SERVICE, "vllm.service is active"
        )


def test_activating_within_the_bound_waits():
    for mode in ("auto", "service"):
        decision = decide(unit("activating", "start"), mode, elapsed=BOUND - 1)
        waiting = "vllm.service is activating (start): waited 3599 s"
        assert decision == acc.Decision(acc.WAIT, waiting)
    assert decide(unit("reloading", "reload"), elapsed=10).action == acc.WAIT


def test_activating_after_the_bound_fails_naming_the_state_and_the_variable():
    decision = decide(unit("activating", "start"), elapsed=BOUND)
    assert decision.action == acc.FAIL
    assert decision.reason == (
        "vllm.service is still activating (start) after 3600 s "
        "(acceptance_activating_timeout; journalctl -u vllm says why)"
    )
    # a bound of 0 does not wait at all
    assert acc.decide("auto", "vllm", unit("activating", "start"), 0.0, 0.0).action == acc.FAIL


def test_a_restarting_unit_fails_at_once_naming_its_result():
    for sub in ("auto-restart", "auto-restart-queued"):  # systemd 254 added the second
        decision = decide(unit("activating", sub, "exit-code"), elapsed=0)
        assert decision == acc.Decision(
            acc.FAIL,
            "vllm.service is restarting after a failure "
            "(result exit-code; journalctl -u vllm says why)",
        )


def test_a_failed_unit_fails_naming_its_result():
    for mode in ("auto", "service"):
        decision = decide(unit("failed", "failed", "start-limit-hit"), mode)
        assert decision == acc.Decision(
            acc.FAIL, "vllm.service failed (result start-limit-hit; journalctl -u vllm says why)"
        )


@pytest.mark.parametrize(
    ("state", "seen"),
    [
        (unit("inactive", "dead"), "inactive (dead)"),
        (unit("deactivating", "stop-sigterm"), "deactivating (stop-sigterm)"),
    ],
)
def test_a_stopped_unit_fails_and_says_what_to_do(state: acc.UnitState, seen: str):
    for mode in ("auto", "service"):
        decision = decide(state, mode)
        assert decision == acc.Decision(
            acc.FAIL,
            f"vllm.service is {seen}, not serving: start it, or set "
            "acceptance_serve_mode: temporary for a short-lived server",
        )


def test_no_unit_starts_a_temporary_server_in_mode_auto_only():
    missing = unit("inactive", "dead", load="not-found")
    assert decide(missing) == acc.Decision(acc.TEMPORARY, "no unit vllm.service on the node")
    assert decide(missing, "service") == acc.Decision(
        acc.FAIL, "no unit vllm.service on the node (serve_mode service)"
    )


def test_a_unit_that_cannot_load_fails_naming_its_load_state():
    for load in ("masked", "bad-setting", "error"):
        decision = decide(unit("inactive", "dead", load=load))
        assert decision == acc.Decision(acc.FAIL, f"vllm.service cannot run (LoadState {load})")


def test_serve_mode_temporary_is_a_temporary_server_whatever_the_unit():
    for state in (unit("active", "running"), unit("activating", "start"), acc.UnitState()):
        assert decide(state, "temporary") == acc.Decision(acc.TEMPORARY, "serve_mode temporary")


# -------------------------------------------------------------------- reading the unit


def test_parse_show_reads_key_value_lines_in_any_order():
    text = "SubState=start\nResult=success\nActiveState=activating\nLoadState=loaded\n"
    assert acc.parse_show(text) == unit("activating", "start")
    assert acc.parse_show("") == acc.UnitState()


def test_read_unit_asks_systemctl_show_and_fails_closed_when_it_cannot():
    seen: list[list[str]] = []

    def run(argv: list[str], stdin: str, env: dict[str, str]) -> tuple[int, str, str]:
        seen.append(argv)
        return 1, "", "Failed to connect to bus: No such file or directory"

    with pytest.raises(acc.UnitUnreadable) as err:
        acc.read_unit(run, "vllm")
    assert str(err.value) == (
        "systemctl show vllm.service exited 1: Failed to connect to bus: No such file or directory"
    )
    assert seen == [
        ["systemctl", "show", "--property=LoadState,ActiveState,SubState,Result", "vllm.service"]
    ]


# ------------------------------------------------------------------------------ settle


class Clock:
    """A clock that moves only when the check sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def settle(states: list[acc.UnitState], bound: float = 60.0, mode: str = "auto"):
    clock, reads = Clock(), iter(states)
    out = acc.settle(mode, "vllm", lambda: next(reads), bound, 10.0, clock.sleep, lambda: clock.now)
    return (*out, clock.sleeps)


def test_settle_polls_an_activating_unit_until_it_is_active():
    states = [unit("activating", "start")] * 3 + [unit("active", "running")]
    decision, state, waited, sleeps = settle(states)
    assert decision.action == acc.USE_SERVICE and state.active == "active"
    assert waited == 30.0 and sleeps == [10.0, 10.0, 10.0]


def test_settle_gives_up_at_the_bound_with_a_last_look():
    decision, state, waited, sleeps = settle([unit("activating", "start")] * 10, bound=25.0)
    assert decision.action == acc.FAIL and "after 25 s" in decision.reason
    assert state.active == "activating"
    assert sleeps == [10.0, 10.0, 5.0] and waited == 25.0


def test_settle_stops_when_the_start_fails_while_it_waits():
    states = [unit("activating", "start"), unit("activating", "auto-restart", "timeout")]
    decision = settle(states)[0]
    assert decision.reason.startswith("vllm.service is restarting after a failure (result timeout")


def test_settle_in_mode_temporary_never_reads_the_unit():
    decision, state, waited, sleeps = settle([], mode="temporary")
    assert decision.action == acc.TEMPORARY and state == acc.UnitState()
    assert sleeps == [] and waited == 0.0


def test_settle_fails_only_on_a_state_read_at_or_after_the_bound():
    """A read slower than the bound (a loaded node): the first look still counts as time 0, so
    the unit is read once more at the bound before it is failed."""
    clock, reads = Clock(), []

    def slow_read() -> acc.UnitState:
        reads.append(clock.now)
        clock.now += 3.0  # each systemctl call takes longer than the whole bound
        return unit("activating", "start")

    decision, _state, waited = acc.settle(
        "auto", "vllm", slow_read, 2.0, 10.0, clock.sleep, lambda: clock.now
    )
    assert decision.action == acc.FAIL
    assert len(reads) == 2 and reads[-1] >= 2.0 and waited >= 2.0
