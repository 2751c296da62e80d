"""Run a unit-test playbook on localhost with this checkout's ansible.cfg and collections."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
) -> subprocess.CompletedProcess[str]:
    """ansible-playbook -i ``inventory`` ``play`` -e ``variables`` (JSON) ``flags``; the result,
    not checked."""
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"),
        ANSIBLE_NOCOLOR="1",
    )
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", inventory, str(play),
         "-e", json.dumps(variables), *(flags or [])],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout, check=False,
    )  # fmt: skip
