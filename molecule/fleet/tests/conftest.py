"""fleet scenario: print the rollout figures the tests record (counts of client requests), and
write them as JSON for scripts/fleet-bench (docs/benchmarks.md).

The JSON goes to $FLEET_FIGURES, default <checkout>/.cache/fleet/figures.json (git-ignored):
the measured figures of this run with its date and machine; no key is ever in it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
from pathlib import Path
from typing import Any

import pytest

_FIGURES = pytest.StashKey[list]()
_RESULTS = pytest.StashKey[dict]()
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> list[str]:
    """Lines printed at the end of the run (terminal summary), e.g. the request counts."""
    return request.config.stash.setdefault(_FIGURES, [])


@pytest.fixture
def results(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Measured figures by name (written to the figures JSON at the end of the session)."""
    found = request.config.stash.setdefault(_RESULTS, {})
    if not found:
        found["started_utc"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M")
        found["machine_at_start"] = machine()
    return found


@pytest.fixture(scope="session")
def ca(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The gateway's self-signed certificate (role gateway's), trusted as its own CA."""
    from test_fleet import CONF, GW, sh

    path = tmp_path_factory.mktemp("gateway") / "gateway.pem"
    path.write_text(sh(GW, f"cat {CONF}/tls.pem"))
    return str(path)


def machine() -> dict[str, Any]:
    """What the figures were measured on (the controller runs the containers too)."""
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem_kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal:"))
    return {"host": platform.node(), "cpus": os.cpu_count(), "cpu": cpu,
            "mem_gib": round(mem_kib / 2**20, 1), "kernel": platform.release(),
            "loadavg": [round(x, 2) for x in os.getloadavg()]}


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    found = session.config.stash.get(_RESULTS, {})
    if not found:  # nothing measured (e.g. a collection-only run)
        return
    found["finished_utc"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M")
    found["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    found["pytest_exit_status"] = int(exitstatus)
    path = Path(os.environ.get("FLEET_FIGURES", REPO / ".cache" / "fleet" / "figures.json"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(found, indent=2) + "\n")


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    lines = config.stash.get(_FIGURES, [])
    if lines:
        terminalreporter.section("fleet: client requests through the gateway during the rollouts")
        for line in lines:
            terminalreporter.write_line(line)
