"""Role gateway's input checks that concern the listeners: the metrics listener needs a port of
its own (real ansible-playbook on localhost, the role's tasks/assert.yml with its defaults)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from local_play import run_local_playbook

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "roles" / "gateway"
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  connection: local
  vars_files:
    - "{{ role }}/defaults/main.yml"
    - "{{ role }}/vars/main.yml"
  tasks:
    - ansible.builtin.include_tasks: "{{ role }}/tasks/assert.yml"
"""
VALID = {
    "gateway_api_keys": [{"name": "client", "key": "client-key-0123456789abcdef"}],
    "gateway_node_api_key": "node-key-0123456789abcdef",
    "gateway_nodes": [{"name": "node1", "address": "127.0.0.1", "port": 8000}],
}


def run_asserts(tmp_path: Path, **over: Any) -> tuple[int, str]:
    play = tmp_path / "play.yml"
    play.write_text(PLAYBOOK)
    variables = {"role": str(ROLE), "ansible_python_interpreter": sys.executable, **VALID, **over}
    run = run_local_playbook(play, variables)
    return run.returncode, run.stdout + run.stderr


def test_the_defaults_pass(tmp_path: Path) -> None:
    rc, out = run_asserts(tmp_path)
    assert rc == 0, out[-3000:]


@pytest.mark.parametrize("port", [8443, 0, 70000])
def test_the_metrics_port_is_a_port_of_its_own(tmp_path: Path, port: int) -> None:
    rc, out = run_asserts(tmp_path, gateway_metrics_port=port, gateway_port=8443)
    assert rc != 0
    assert "gateway_metrics_port must be a port 1-65535 other than gateway_port (8443)" in out
