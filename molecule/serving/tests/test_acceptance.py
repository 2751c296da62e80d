"""serving scenario: playbooks/acceptance.yml against the node (cpu stack, its running vLLM
service). Runs the playbook once through ansible-runner (~40 s) and reads the JSON report it
writes on the controller: GPU checks skipped with the reason, vLLM's own platform cpu, one
completion through the service's API, every check run as the service's user (become, over the
podman connection as root), and the API key nowhere in the report or the run's log.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
SCENARIO = Path(__file__).resolve().parents[1]
PLAYBOOK = ROOT / "playbooks" / "acceptance.yml"
NODE = "serving-node"
SKIP_REASON = "stack 'cpu' has no GPU (device cpu)"


def node_vars() -> dict:
    """The node's inventory vars, as molecule.yml gives them to converge."""
    config = yaml.safe_load((SCENARIO / "molecule.yml").read_text())
    return dict(config["provisioner"]["inventory"]["group_vars"]["vllm_nodes"])


_RUN: dict = {}


@pytest.fixture
def accepted(ansible_run, podman_hostvars, tmp_path_factory: pytest.TempPathFactory):
    """One run of the playbook for all tests of this file (the fixtures are per test)."""
    if not _RUN:
        reports = tmp_path_factory.mktemp("acceptance-reports")
        hostvars = node_vars()
        _RUN["run"] = ansible_run(
            PLAYBOOK,
            {NODE: podman_hostvars(NODE, **hostvars)},
            extravars={"instinct_vllm_hosts": NODE, "acceptance_report_dir": str(reports)},
        )
        _RUN["report"] = reports / f"{NODE}.json"
        _RUN["key"] = hostvars["vllm_service_api_key"]
    return _RUN["run"], _RUN["report"], _RUN["key"]


def test_the_playbook_passes_the_node(accepted):
    run, report_file = accepted[:2]
    assert run.rc == 0, run.failure_messages()
    assert run.count("failures") == 0
    assert run.count("changed") <= 2  # the report directory (its mode) and the report
    assert report_file.is_file()


def test_gpu_checks_are_skipped_with_the_reason_on_cpu(accepted):
    report = json.loads(accepted[1].read_text())
    assert report["stack"] == "cpu" and report["device"] == "cpu"
    for name in ("gpu_matmul", "gpu_health", "collectives", "firmware", "kernel_log"):
        assert report["checks"][name]["status"] == "skipped"
        assert report["checks"][name]["reason"] == SKIP_REASON


def test_vllms_own_platform_is_cpu_with_an_attention_backend(accepted):
    check = json.loads(accepted[1].read_text())["checks"]["vllm_platform"]
    assert check["status"] == "ok", check["reason"]
    assert check["detail"]["platform"] == "cpu"
    assert check["detail"]["vllm"].startswith("0.32.0")
    assert check["detail"].get("attention_backend"), check["detail"]
    assert "attention_backend_error" not in check["detail"]


def test_one_completion_through_the_running_service(accepted):
    report = json.loads(accepted[1].read_text())
    check = report["checks"]["serve"]
    assert check["status"] == "ok", check["reason"]
    assert check["detail"]["mode"] == "service" and check["detail"]["service"] == "active"
    assert check["detail"]["model"] == node_vars()["vllm_service_served_model_name"]
    assert check["detail"]["completion_tokens"] >= 1
    assert report["status"] == "ok" and report["failures"] == []


def test_every_check_ran_as_the_service_user(accepted):
    """vllm_service_user is not set in molecule.yml: role vllm_service's default, vllm. The
    kernel log is read as root."""
    checks = json.loads(accepted[1].read_text())["checks"]
    ran_as = {name: check["detail"].get("user") for name, check in checks.items()}
    names = ("gpu_matmul", "vllm_platform", "gpu_health", "serve", "collectives", "firmware")
    assert ran_as == {**dict.fromkeys(names, "vllm"), "kernel_log": "root"}


def test_the_api_key_is_in_neither_the_report_nor_the_log(accepted):
    run, report_file, key = accepted
    assert key not in report_file.read_text()
    assert key not in json.dumps(run.events)
