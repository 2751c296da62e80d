"""Run a unit-test playbook on localhost with this checkout's ansible.cfg and collections."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def role_play(tasks: str) -> str:
    """A localhost play with a role's defaults and vars loaded (the role's path as the variable
    ``role``) and ``tasks``: YAML list items, indented four spaces."""
    return (
        "- hosts: localhost\n"
        "  gather_facts: false\n"
        "  connection: local\n"
        "  vars_files:\n"
        '    - "{{ role }}/defaults/main.yml"\n'
        '    - "{{ role }}/vars/main.yml"\n'
        "  tasks:\n" + tasks
    )


def run_local_playbook(
    play: Path,
    variables: dict[str, Any],
    inventory: str = "localhost,",
    flags: list[str] | None = None,
    timeout: float = 120,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """ansible-playbook -i ``inventory`` ``play`` -e ``variables`` (JSON) ``flags``, with ``env``
    over the checkout's settings; the result, not checked."""
    environ = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"),
        ANSIBLE_NOCOLOR="1",
        **(env or {}),
    )
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", inventory, str(play),
         "-e", json.dumps(variables), *(flags or [])],
        capture_output=True, text=True, env=environ, cwd=ROOT, timeout=timeout, check=False,
    )  # fmt: skip


@dataclass
class Case:
    """One host's part of a run_cases playbook: whether it failed (a failed or unreachable task:
    ansible-playbook's exit code had it run alone) and every string of its task results, one a
    line (the messages a failing task prints)."""

    failed: bool
    output: str


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def run_cases(
    play: Path, cases: Mapping[str, Mapping[str, Any]], variables: Mapping[str, Any] | None = None
) -> dict[str, Case]:
    """One ansible-playbook for many cases of a play on ``hosts: all``: each case is a local
    host (named case0, case1, ...) whose host variables are the case's, so its tasks see them as
    if they were the only ones; ``variables`` are extra variables common to all. Each case's
    result comes from the JSON callback's per-host results and stats."""
    names = {f"case{n}": case for n, case in enumerate(cases)}
    hosts = {
        name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
               **cases[case]}
        for name, case in names.items()
    }  # fmt: skip
    inventory = play.with_name(play.stem + "-hosts.json")
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    run = run_local_playbook(
        play, dict(variables or {}), inventory=str(inventory), timeout=600,
        env={"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "ANSIBLE_JSON_INDENT": "0"},
    )  # fmt: skip
    try:
        report = json.loads(run.stdout)
    except json.JSONDecodeError as err:
        raise AssertionError(f"ansible-playbook failed: {run.stdout[-3000:]}{run.stderr}") from err
    results: dict[str, list[str]] = {name: [] for name in names}
    for play_report in report["plays"]:
        for task in play_report["tasks"]:
            for name, result in task["hosts"].items():
                results[name].extend(_strings(result))
    stats = report["stats"]
    return {
        case: Case(name not in stats or stats[name]["failures"] + stats[name]["unreachable"] > 0,
                   "\n".join(results[name]))
        for name, case in names.items()
    }  # fmt: skip
