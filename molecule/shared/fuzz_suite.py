"""The request fuzz as pytest tests, for any scenario that serves a node (and a gateway).

A scenario's test module calls :func:`tests` with its endpoints and binds the returned functions
to names starting with ``test_``; pytest runs them in order: every case against the node
directly, then through the gateway, then the check that the engine survived them all (the unit's
MainPID and NRestarts unchanged, /health 200, an ordinary completion answered). After a case
that left the engine unhealthy, that case fails and the suite waits for the node to serve again
before the next one, so one run names every request that takes a node down.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import request_fuzz as rf

UNIT = "vllm.service"


@dataclass(frozen=True)
class Target:
    name: str  # direct | gateway
    base_url: str
    key: str


@dataclass(frozen=True)
class Node:
    """The node under test: its direct URL and key (health, recovery) and its model."""

    base_url: str
    key: str
    model: str
    max_num_seqs: int
    recover_timeout: float = 600.0


def unit_state(host) -> tuple[str, str]:
    out = host.check_output(f"systemctl show -P MainPID,NRestarts {UNIT}").split()
    return out[0], out[1]


def healthy(node: Node, timeout: float = 10.0) -> bool:
    try:
        with urllib.request.urlopen(node.base_url + "/health", timeout=timeout) as response:
            return response.status == 200
    except OSError:
        return False


def wait_serving(node: Node) -> float:
    """Seconds until an ordinary completion answers 200 again (raises after recover_timeout)."""
    start = time.monotonic()
    plain = rf.Case("plain", rf.COMPLETIONS, {"model": node.model, "prompt": "Hi",
                                              "max_tokens": 1}, expect=rf.OK)
    while time.monotonic() - start < node.recover_timeout:
        if rf.send(node.base_url, node.key, plain, timeout=30).status == 200:
            return time.monotonic() - start
        time.sleep(3)
    raise AssertionError(f"the node did not serve again within {node.recover_timeout:g}s")


def _report_path(scenario: str) -> Path:
    base = os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY") or "/tmp"
    return Path(base) / f"request-fuzz-{scenario}.jsonl"


def _record(scenario: str, target: Target, case: rf.Case, answer: rf.Answer,
            why: str | None, healthy_after: bool) -> None:
    row = {"target": target.name, "case": case.name, "status": answer.status,
           "seconds": round(answer.seconds, 2), "problem": why, "healthy_after": healthy_after,
           "message": (rf.error_message(answer.body) or "")[:160]}
    with _report_path(scenario).open("a") as out:
        out.write(json.dumps(row) + "\n")


def tests(scenario: str, node: Node, targets: list[Target]) -> tuple[Callable, Callable]:
    """(test_request_gets_an_answer, test_engine_survived_every_request) for this scenario."""
    cases = rf.all_cases(node.model, node.max_num_seqs)
    params = [pytest.param(t, c, id=f"{t.name}:{c.name}") for t in targets for c in cases]
    state: dict[str, tuple[str, str]] = {}

    @pytest.mark.parametrize(("target", "case"), params)
    def request_gets_an_answer(host, target: Target, case: rf.Case) -> None:
        if not state:
            _report_path(scenario).unlink(missing_ok=True)
            state["before"] = unit_state(host)
        answer = rf.send(target.base_url, target.key, case)
        why = rf.problem(case, answer)
        alive = healthy(node)
        _record(scenario, target, case, answer, why, alive)
        if not alive:
            waited = wait_serving(node)
            why = f"{why or 'answered'}; the engine was down after it (served again after "
            why += f"{waited:.0f}s, MainPID/NRestarts {unit_state(host)})"
        assert why is None, why

    def engine_survived_every_request(host) -> None:
        assert state, "no fuzz case ran"
        assert unit_state(host) == state["before"], (
            f"MainPID, NRestarts before the fuzz {state['before']}, after {unit_state(host)}"
        )
        assert healthy(node)
        assert wait_serving(node) < 30

    return request_gets_an_answer, engine_survived_every_request
