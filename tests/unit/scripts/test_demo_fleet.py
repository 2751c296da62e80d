"""scripts/demo's fleet choice (`make demo-fleet`, `FLEET=1 make demo`, `up --fleet`): which
containers, the generated inventory (no secret in it), the key files and what is printed.
No container is started here."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[3]


def load_demo() -> ModuleType:
    return load_script("instinct_demo", ROOT / "scripts" / "demo")


demo = load_demo()


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        (["up"], {}, False),
        (["up", "--fleet"], {}, True),
        (["up"], {"INSTINCT_DEMO_FLEET": "1"}, True),
        (["up"], {"INSTINCT_DEMO_FLEET": "yes"}, True),
        (["up"], {"INSTINCT_DEMO_FLEET": "0"}, False),
        (["up"], {"INSTINCT_DEMO_FLEET": ""}, False),
    ],
)
def test_the_fleet_is_chosen_by_flag_or_variable(argv, environ, expected):
    assert demo.wants_fleet(argv, environ) is expected


def test_the_makefile_passes_the_choice():
    makefile = (ROOT / "Makefile").read_text()
    assert "scripts/demo up --fleet" in makefile  # make demo-fleet
    assert "INSTINCT_DEMO_FLEET=$(FLEET)" in makefile  # FLEET=1 make demo


def test_a_gateway_and_two_nodes_on_their_own_ports():
    members = demo.fleet_members("demo", 18000, 18443)
    assert [(m.name, m.group, m.host_port, m.port) for m in members] == [
        ("demo-gw", "gateways", 18443, 8443),
        ("demo1", "vllm_nodes", 18001, 8000),
        ("demo2", "vllm_nodes", 18002, 8000),
    ]


def test_the_inventory_holds_no_secret_and_names_the_key_files():
    members = demo.fleet_members("demo", 18000, 18443)
    client_key = "a-client-key-0123456789abcdef"
    digest = hashlib.sha256(client_key.encode()).hexdigest()
    inventory = demo.fleet_inventory(members, Path("/x/.cache/demo/api_key"), digest)
    text = yaml.safe_dump(inventory)
    assert client_key not in text
    assert inventory["gateways"]["vars"]["gateway_api_keys"] == [
        {"name": "demo-client", "key_sha256": digest}]
    assert set(inventory["vllm_nodes"]["hosts"]) == {"demo1", "demo2"}
    assert set(inventory["gateways"]["hosts"]) == {"demo-gw"}
    node = inventory["vllm_nodes"]["hosts"]["demo2"]
    assert node["vllm_verify_base_url"] == "http://127.0.0.1:18002"
    # the nodes' key: a file lookup at host level (over the single-node group_vars' path)
    lookup = "{{ lookup('ansible.builtin.file', '/x/.cache/demo/api_key') }}"
    assert node["vllm_service_api_key"] == lookup
    assert inventory["gateways"]["hosts"]["demo-gw"]["vllm_service_api_key"] == lookup


def test_a_secret_file_is_made_once_with_mode_0600(tmp_path):
    key = tmp_path / "demo" / "client_key"
    assert demo.ensure_secret_file(key) is True
    first = key.read_text()
    assert len(first.strip()) >= 32 and key.stat().st_mode & 0o777 == 0o600
    os.chmod(key, 0o644)
    assert demo.ensure_secret_file(key) is False
    assert key.read_text() == first and key.stat().st_mode & 0o777 == 0o600


def test_the_client_key_is_printed_to_a_terminal_only(tmp_path):
    key_file = tmp_path / "client_key"
    on_tty = demo.client_key_line("k-0123456789", key_file, to_terminal=True)
    piped = demo.client_key_line("k-0123456789", key_file, to_terminal=False)
    assert "k-0123456789" in on_tty and str(key_file) in on_tty
    assert "k-0123456789" not in piped and str(key_file) in piped


def test_usage_names_the_fleet_flag(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["scripts/demo", "sideways", "--fleet"])
    assert demo.main() == 2
    assert "[--fleet]" in capsys.readouterr().err
