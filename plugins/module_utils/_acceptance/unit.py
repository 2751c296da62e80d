"""The vLLM unit's state, and what the serve check does with it.

The unit is Type=notify and its wrapper sends READY=1 once the model is served, so systemd
keeps it `activating` for the whole model load (many minutes for a 120B model) and `active`
means serving. The serve check reads LoadState, ActiveState, SubState and Result with
`systemctl show` (no root needed) and decides with `decide`:

- active: one completion through the service;
- activating (start) or reloading: wait, polling, up to a bound; still so after it: fail;
- activating (auto-restart): the unit died and systemd restarts it: fail, naming the result;
- failed: fail, naming the result;
- loaded but inactive or deactivating: fail (start it, or ask for a temporary server);
- not-found (no unit by that name): a temporary server in mode auto, a failure in mode service;
- masked, bad-setting, error: fail, naming the LoadState.

A temporary server is started only when the node has no such unit or when serve_mode is
temporary: never on GPUs a starting or restarting service is filling.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from .probe import Runner, tail

USE_SERVICE = "use-service"
WAIT = "wait"
TEMPORARY = "temporary"
FAIL = "fail"
PROPERTIES = ("LoadState", "ActiveState", "SubState", "Result")
# what the failure messages name: the playbook variable of the bound
BOUND_VARIABLE = "acceptance_activating_timeout"


@dataclass(frozen=True)
class UnitState:
    load: str = ""  # LoadState: loaded, not-found, masked, bad-setting, error
    active: str = ""  # ActiveState: active, activating, reloading, deactivating, inactive, failed
    sub: str = ""  # SubState: running, start, auto-restart, dead, failed...
    result: str = ""  # Result: success, exit-code, signal, timeout, watchdog, start-limit-hit...

    def describe(self) -> str:
        return f"{self.active} ({self.sub})" if self.sub else self.active

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class Decision:
    action: str  # USE_SERVICE, WAIT, TEMPORARY or FAIL
    reason: str


class UnitUnreadable(Exception):
    """systemctl did not report the unit (no systemd, no bus): the message says why."""


def parse_show(text: str) -> UnitState:
    """The state from `systemctl show --property=...` output (Key=Value lines, any order)."""
    values = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    return UnitState(
        values.get("LoadState", ""),
        values.get("ActiveState", ""),
        values.get("SubState", ""),
        values.get("Result", ""),
    )


def read_unit(run: Runner, service: str) -> UnitState:
    argv = ["systemctl", "show", f"--property={','.join(PROPERTIES)}", f"{service}.service"]
    rc, out, err = run(argv, "", {})
    unit = parse_show(out)
    if rc != 0 or not unit.load:
        raise UnitUnreadable(f"systemctl show {service}.service exited {rc}: {tail(err or out, 3)}")
    return unit


def decide(mode: str, service: str, unit: UnitState, elapsed: float, bound: float) -> Decision:
    """What the serve check does for the unit as seen `elapsed` seconds after the first look."""
    name = f"{service}.service"
    if mode == "temporary":
        return Decision(TEMPORARY, "serve_mode temporary")
    if unit.load == "not-found":
        if mode == "auto":
            return Decision(TEMPORARY, f"no unit {name} on the node")
        return Decision(FAIL, f"no unit {name} on the node (serve_mode service)")
    if unit.load != "loaded":
        return Decision(FAIL, f"{name} cannot run (LoadState {unit.load})")
    if unit.active == "active":
        return Decision(USE_SERVICE, f"{name} is active")
    return _not_active(name, service, unit, elapsed, bound)


def _not_active(name: str, service: str, unit: UnitState, elapsed: float, bound: float) -> Decision:
    journal = f"journalctl -u {service} says why"
    if unit.active == "failed":
        return Decision(FAIL, f"{name} failed (result {unit.result}; {journal})")
    if unit.active == "activating" and unit.sub.startswith("auto-restart"):
        return Decision(
            FAIL, f"{name} is restarting after a failure (result {unit.result}; {journal})"
        )
    if unit.active in ("activating", "reloading"):
        if elapsed < bound:
            return Decision(WAIT, f"{name} is {unit.describe()}: waited {elapsed:.0f} s")
        return Decision(
            FAIL,
            f"{name} is still {unit.describe()} after {bound:g} s ({BOUND_VARIABLE}; {journal})",
        )
    return Decision(
        FAIL,
        f"{name} is {unit.describe()}, not serving: start it, or set "
        "acceptance_serve_mode: temporary for a short-lived server",
    )


def settle(
    mode: str,
    service: str,
    read: Callable[[], UnitState],
    bound: float,
    poll: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[Decision, UnitState, float]:
    """Read the unit until the decision is not WAIT: (decision, last state, seconds waited).
    Mode temporary never reads it. UnitUnreadable from `read` goes to the caller. The time is
    taken before each read, so a unit is failed only on a state read at or after the bound
    (however long a read takes on a loaded node)."""
    start = clock()
    while True:
        elapsed = clock() - start
        unit = UnitState() if mode == "temporary" else read()
        decision = decide(mode, service, unit, elapsed, bound)
        if decision.action != WAIT:
            return decision, unit, elapsed
        sleep(max(0.0, min(poll, bound - elapsed)))
