"""inventories/mi300x resolves to the job it exists for: the legacy "gpt-oss-120B" checkpoint
converted by role model, served under a client name with tensor parallel 8; the README's vault
steps work as written. The real gpt-oss-120b has its own inventory
(test_inventory_mi300x_gpt_oss.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.instinct.vllm.plugins.plugin_utils import stack_matrix as sm

ROOT = Path(__file__).resolve().parents[3]
INVENTORY = ROOT / "inventories" / "mi300x"
GROUP_VARS = INVENTORY / "group_vars" / "vllm_nodes"
BIN = Path(sys.executable).parent
HOSTS = ("mi300x-01", "mi300x-02")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"),
        ANSIBLE_NOCOLOR="1",
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    return env


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / argv[0]), *argv[1:]],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def _hostvars(inventory: Path, *extra: str) -> dict[str, Any]:
    run = _run("ansible-inventory", "-i", str(inventory), "--list", *extra)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)["_meta"]["hostvars"]


@pytest.fixture(scope="module")
def hostvars() -> dict[str, Any]:
    return _hostvars(INVENTORY)


def test_every_node_serves_the_converted_legacy_checkpoint(hostvars: dict[str, Any]) -> None:
    assert sorted(hostvars) == sorted(HOSTS)
    for host in HOSTS:
        hv = hostvars[host]
        assert hv["instinct_vllm_stack"] == "rocm-6.2.1"
        assert hv["model_source"] == "path"
        assert hv["model_src_path"] == "/srv/models/gpt-oss-120B-legacy"
        assert hv["model_name"] == "gpt-oss-120B"
        assert hv.get("model_convert_enabled", True) is True  # converted, not served raw
        assert hv["vllm_service_served_model_name"] == "gpt-oss-120B"
        assert hv["vllm_service_flags"]["tensor-parallel-size"] == 8
        assert hv["preflight_model_architecture"] == "LlamaForCausalLM"


def test_served_path_resolves_to_the_conversion_output() -> None:
    """Templated as Ansible does for a host (debug needs no connection): without a run of role
    model the default is the directory role model converts into (model_root/model_name)."""
    run = _run(
        "ansible",
        HOSTS[0],
        "-i",
        str(INVENTORY),
        "-m",
        "ansible.builtin.debug",
        "-a",
        "msg={{ vllm_service_model }}|{{ preflight_model_config_file }}",
    )
    assert run.returncode == 0, run.stdout + run.stderr
    model_root = yaml.safe_load((ROOT / "roles/model/defaults/main.yml").read_text())["model_root"]
    expected = f"{model_root}/gpt-oss-120B|/srv/models/gpt-oss-120B-legacy/config.json"
    assert f"msg: {expected}" in run.stdout, run.stdout


def test_the_stack_serves_it_with_tp_8(hostvars: dict[str, Any]) -> None:
    hv = hostvars[HOSTS[0]]
    stack = sm.get_stack(hv["instinct_vllm_stack"])
    assert hv["preflight_model_architecture"] in stack["model_architectures"]
    assert 64 % hv["vllm_service_flags"]["tensor-parallel-size"] == 0  # the legacy model's heads


def test_readme_vault_steps_work_as_written(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    assert "group_vars/all/vault.yml" not in readme
    assert "cp vault.yml.example vault.yml" in readme
    assert "inventories/myfleet/group_vars/vllm_nodes" in readme
    fleet = tmp_path / "myfleet"
    shutil.copytree(INVENTORY, fleet)
    gv = fleet / "group_vars" / "vllm_nodes"
    shutil.copy(gv / "vault.yml.example", gv / "vault.yml")
    password = tmp_path / "vault-pass"
    password.write_text("unit-test-vault-password\n")
    enc = _run(
        "ansible-vault", "encrypt", "--vault-password-file", str(password), str(gv / "vault.yml")
    )
    assert enc.returncode == 0, enc.stderr
    assert (gv / "vault.yml").read_text().startswith("$ANSIBLE_VAULT;")
    hv = _hostvars(fleet, "--vault-password-file", str(password))[HOSTS[0]]
    assert hv["vault_vllm_api_key"] == "CHANGE-ME-to-a-long-random-string"
    assert hv["vllm_service_api_key"] == "{{ vault_vllm_api_key }}"
    locked = _run("ansible-inventory", "-i", str(fleet), "--list")
    assert locked.returncode != 0 and "vault" in (locked.stdout + locked.stderr).lower()


def test_mi300x_flags_are_the_role_defaults_with_engine_stats_on(hostvars: dict[str, Any]) -> None:
    """disable-log-stats would remove the engine metrics the watchdog and monitoring read."""
    defaults = yaml.safe_load((ROOT / "roles/vllm_service/defaults/main.yml").read_text())
    for host in HOSTS:
        flags = hostvars[host]["vllm_service_flags"]
        assert flags == defaults["vllm_service_flags"], host
        assert not flags.get("disable-log-stats"), host
