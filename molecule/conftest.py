"""Shared by every scenario's testinfra tests: the `sandbox://` connection; on a failed test,
the journal of the units the test module names in JOURNAL_UNITS, read from the host under test;
playbook runs through ansible-runner."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import testinfra.backend

# testinfra's `sandbox://NAME`: the container entered as the Ansible connection enters it
# (molecule/shared/testinfra_sandbox.py), not a `podman exec` per command.
sys.path.insert(0, str(Path(__file__).resolve().parent / "shared"))
testinfra.backend.BACKENDS["sandbox"] = "testinfra_sandbox.SandboxBackend"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when != "call" or not report.failed:
        return report
    units = getattr(item.module, "JOURNAL_UNITS", [])
    host = item.funcargs.get("host")
    if not units or host is None:
        return report
    args = " ".join(f"-u {unit}" for unit in units)
    journal = host.run(f"journalctl --no-pager -n 200 {args}")
    report.sections.append((f"journal of {', '.join(units)}", journal.stdout or journal.stderr))
    return report


# ---- ansible-runner: run a playbook against the host under test and read its events ------------
# The same runner AWX uses. Tests that assert on a run (changed count, which task failed, the
# failure message) use this instead of parsing ansible-playbook's output.


ROOT = Path(__file__).resolve().parents[1]


@dataclass
class PlaybookRun:
    rc: int
    status: str
    stats: dict
    events: list = field(repr=False)

    def count(self, key: str) -> int:
        """Sum of a stats counter ('changed', 'failures', 'ok', ...) over all hosts."""
        return sum((self.stats.get(key) or {}).values())

    def failed_results(self) -> list[dict]:
        """event_data of every failed task result (runner_on_failed), in order."""
        return [e["event_data"] for e in self.events if e.get("event") == "runner_on_failed"]

    def failure_messages(self) -> list[str]:
        return [str(d.get("res", {}).get("msg", "")) for d in self.failed_results()]


def run_playbook(
    playbook: str | Path,
    hosts: dict[str, dict],
    *,
    extravars: dict | None = None,
    check: bool = False,
    tags: str | None = None,
) -> PlaybookRun:
    """Run `playbook` with ansible-runner against `hosts` ({inventory name: host vars});
    each host var set should name the container (`ansible_host`) and its connection."""
    import ansible_runner  # controller .venv

    inventory = {"all": {"hosts": hosts}}
    cmdline = "--check --diff" if check else ""
    with tempfile.TemporaryDirectory(prefix="instinct-runner-") as private:
        runner = ansible_runner.run(
            private_data_dir=private,
            playbook=str(Path(playbook).resolve()),
            inventory=json.loads(json.dumps(inventory)),
            extravars=extravars or {},
            cmdline=cmdline or None,
            tags=tags,
            envvars={
                "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
                "ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".collections"),
                "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
                "ANSIBLE_CONNECTION_PLUGINS": str(ROOT / "molecule/shared/connection_plugins"),
                "ANSIBLE_PIPELINING": "True",
                "ANSIBLE_NOCOLOR": "1",
            },
            quiet=not os.environ.get("INSTINCT_RUNNER_VERBOSE"),
        )
        events = list(runner.events)
        return PlaybookRun(
            rc=runner.rc, status=runner.status, stats=runner.stats or {}, events=events
        )


def podman_host(container: str, **hostvars: object) -> dict:
    """Host vars that reach a sandbox container through the podman connection."""
    return {
        "ansible_connection": "sandbox_podman",
        "ansible_host": container,
        "ansible_python_interpreter": "/usr/bin/python3",
        **hostvars,
    }


@pytest.fixture
def ansible_run():
    """`ansible_run(playbook, {name: podman_host(container, **vars)}, extravars=..., check=...)`
    -> PlaybookRun (rc, status, stats, events, count("changed"), failure_messages())."""
    return run_playbook


@pytest.fixture
def podman_hostvars():
    """`podman_hostvars(container, **vars)` -> host vars for the podman connection."""
    return podman_host
