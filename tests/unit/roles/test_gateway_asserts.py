"""Role gateway's input checks (real ansible-playbook on localhost, the role's tasks/assert.yml
with its defaults): the metrics listener needs a port of its own; key names are checked without
a clear key reaching the task results (printed at -v, kept by AWX)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from local_play import role_play, run_local_playbook

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "roles" / "gateway"
PLAYBOOK = role_play("""\
    - ansible.builtin.include_tasks: "{{ role }}/tasks/assert.yml"
""")
VALID = {
    "gateway_api_keys": [{"name": "client", "key": "client-key-0123456789abcdef"}],
    "gateway_node_api_key": "node-key-0123456789abcdef",
    "gateway_nodes": [{"name": "node1", "address": "127.0.0.1", "port": 8000}],
}


def run_asserts(tmp_path: Path, flags: list[str] | None = None, **over: Any) -> tuple[int, str]:
    play = tmp_path / "play.yml"
    play.write_text(PLAYBOOK)
    variables = {"role": str(ROLE), "ansible_python_interpreter": sys.executable, **VALID, **over}
    run = run_local_playbook(play, variables, flags=flags)
    return run.returncode, run.stdout + run.stderr


def test_the_defaults_pass(tmp_path: Path) -> None:
    rc, out = run_asserts(tmp_path)
    assert rc == 0, out[-3000:]


@pytest.mark.parametrize("port", [8443, 0, 70000])
def test_the_metrics_port_is_a_port_of_its_own(tmp_path: Path, port: int) -> None:
    rc, out = run_asserts(tmp_path, gateway_metrics_port=port, gateway_port=8443)
    assert rc != 0
    assert "gateway_metrics_port must be a port 1-65535 other than gateway_port (8443)" in out


CLEAR_KEYS = ["first-client-key-5a1c9e0b7d", "second-client-key-8f2e6d4c1"]


@pytest.mark.parametrize("names", [["first", "second"], ["first", "bad name"]])
def test_no_clear_key_in_the_verbose_output(tmp_path: Path, names: list[str]) -> None:
    keys = [{"name": n, "key": k} for n, k in zip(names, CLEAR_KEYS, strict=True)]
    rc, out = run_asserts(tmp_path, flags=["-vvv"], gateway_api_keys=keys)
    assert "Check that every client key has a valid name" in out
    assert not [k for k in CLEAR_KEYS if k in out]
    if names[1] == "bad name":  # the check still says which entry and why
        assert rc != 0
        assert "gateway_api_keys[1] needs a name of [A-Za-z0-9_.-]" in out and "'bad name'" in out
    else:
        assert rc == 0, out[-3000:]


# Ansible's own check of the role's argument spec (what runs before the role's first task), for
# gateway_api_keys alone: each entry's fields and their types are the spec's, not a task's.
SPEC_PLAYBOOK = """\
- hosts: localhost
  gather_facts: false
  connection: local
  tasks:
    - ansible.builtin.validate_argument_spec:
        argument_spec:
          gateway_api_keys: "{{ (lookup('file', role ~ '/meta/argument_specs.yml') | from_yaml)
                                .argument_specs.main.options.gateway_api_keys }}"
        provided_arguments:
          gateway_api_keys: "{{ gateway_api_keys }}"
"""


@pytest.mark.parametrize(("entry", "error"), [
    ({"name": "client", "key": CLEAR_KEYS[0], "rate_limit": 10, "max_concurrency": 2}, None),
    ({"key": CLEAR_KEYS[0]}, "missing required arguments: name"),
    ({"name": "client", "key": CLEAR_KEYS[0], "max_concurency": 2},
     "gateway_api_keys.max_concurency. Supported parameters include"),
    ({"name": "client", "key_sha256": "ab" * 32, "rate_limit": "many"}, "rate_limit"),
])
def test_the_spec_checks_each_key_entry(tmp_path: Path, entry: dict[str, Any],
                                        error: str | None) -> None:
    play = tmp_path / "play.yml"
    play.write_text(SPEC_PLAYBOOK)
    run = run_local_playbook(play, {"role": str(ROLE), "gateway_api_keys": [entry],
                                    "ansible_python_interpreter": sys.executable})
    out = run.stdout + run.stderr
    if error is None:
        assert run.returncode == 0, out[-3000:]
    else:
        assert run.returncode != 0 and error in out, out[-3000:]
    assert CLEAR_KEYS[0] not in out
