"""awx scenario: the deploy and verify job templates, run as AWX jobs (ansible-runner, process
isolation in the EE image, credentials injected), against one sandbox node over SSH."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

JOURNAL_UNITS = ["vllm.service"]

REPO = Path(__file__).resolve().parents[3]
JOBS = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "awx-jobs"
INPUTS = json.loads((JOBS / "credential-inputs.json").read_text())
API_KEY = INPUTS["instinct-vllm client API key"]["api_key"]
HF_TOKEN = INPUTS["instinct-vllm Hugging Face token"]["hf_token"]
SECRETS = {"the vLLM API key": API_KEY, "the HF token": HF_TOKEN}
VERIFY_TASK = "Check the OpenAI-compatible API"


def summary(ident: str) -> dict:
    return json.loads((JOBS / f"{ident}.json").read_text())


def artifacts(ident: str) -> Path:
    return Path(summary(ident)["private_data_dir"]) / "artifacts" / ident


def events(ident: str) -> list[dict]:
    found = sorted((artifacts(ident) / "job_events").glob("*.json"))
    return [json.loads(p.read_text()) for p in found]


def test_secrets_are_distinctive() -> None:
    # The leak checks below grep for these: they must be long, and not the same.
    assert len(API_KEY) > 20 and len(HF_TOKEN) > 20 and API_KEY != HF_TOKEN


def test_the_ee_has_what_the_collection_needs() -> None:
    image = json.loads((JOBS / "ee.json").read_text())["image"]
    out = subprocess.run(
        ["podman", "run", "--rm", "--runtime=runc", "--ulimit=nofile=20000:20000",
         "--ulimit=nproc=32768:32768", "--user=root", image, "bash", "-c",
         "python3 -c 'import openai, matplotlib; print(openai.__version__)'"
         " && ansible-galaxy collection list instinct.vllm && command -v ssh-agent"],
        check=True, capture_output=True, text=True,
    ).stdout
    assert "3.57.0" in out and "instinct.vllm" in out and "/usr/bin/ssh-agent" in out


IDENTS = ["awx-deploy", "awx-deploy-unit", "awx-verify"]


@pytest.mark.parametrize("ident", IDENTS)
def test_job_succeeded(ident: str) -> None:
    job = summary(ident)
    assert (job["status"], job["rc"]) == ("successful", 0), job
    assert (artifacts(ident) / "status").read_text().strip() == "successful"


def test_deploy_ran_over_ssh_in_the_ee() -> None:
    command = json.loads((artifacts("awx-deploy") / "command").read_text())["command"]
    assert command[:2] == ["podman", "run"] and "ssh-agent" in command
    starts = [e for e in events("awx-deploy") if e["event"] == "playbook_on_start"]
    assert starts, "no playbook_on_start event"
    # The node's facts came over SSH as the Machine credential's user, then become.
    facts = [e for e in events("awx-deploy") if e["event"] == "runner_on_ok"
             and e["event_data"].get("task") == "Gathering Facts"]
    assert facts
    assert facts[0]["event_data"]["res"]["ansible_facts"]["ansible_hostname"] == "awx-node"


def test_verify_talked_to_vllm() -> None:
    results = [e["event_data"]["res"] for e in events("awx-verify")
               if e["event"] == "runner_on_ok" and e["event_data"].get("task") == VERIFY_TASK]
    assert len(results) == 1, "the verify check did not report once"
    checks = {c["name"]: c for c in results[0]["checks"]}
    # Every check ran and passed: a real (and a streamed) completion came back, and the
    # endpoint refused a client without the key.
    assert set(checks) == {"health", "models", "chat", "chat_stream", "tokenize", "auth_required"}
    assert all(c["ok"] for c in checks.values()), checks
    assert results[0]["model"] == "gpt-oss-120B"  # the survey's default served name


def role_of(data: dict) -> str:
    return data.get("role", "").removeprefix("instinct.vllm.")


def run_yml_tasks() -> set[str]:
    tasks = yaml.safe_load((REPO / "roles/vllm_service/tasks/run.yml").read_text())
    return {t["name"] for t in tasks if "name" in t and "block" not in t}


def test_skip_tags_skipped_the_model_check() -> None:
    """deploy with skip tags vllm_contract: vLLM's model check did not run, the rest did."""
    tasks = {e["event_data"].get("task") for e in events("awx-deploy")
             if e["event"] in ("runner_on_ok", "runner_on_skipped")}
    contract = yaml.safe_load((REPO / "roles/vllm/tasks/contract.yml").read_text())
    names = {t["name"] for t in contract if "name" in t and "block" not in t}
    assert names and not names & tasks
    assert "Write the systemd unit" in tasks


def test_job_tags_ran_the_unit_part_only() -> None:
    """deploy with job tags vllm_service_unit: role stack (always), vllm_service's input
    checks and its unit step; nothing of preflight, vllm, model, the service start, verify."""
    # Ansible's own argument validation of each included role is tagged always too.
    ran = [e["event_data"] for e in events("awx-deploy-unit")
           if e["event"] in ("runner_on_ok", "runner_on_skipped", "runner_on_failed")
           and not e["event_data"]["task"].startswith("Validating arguments against arg spec")]
    assert {role_of(d) for d in ran} <= {"", "stack", "vllm_service"}, {role_of(d) for d in ran}
    tasks = {d["task"] for d in ran}
    assert "Write the systemd unit" in tasks
    assert any(role_of(d) == "stack" for d in ran)
    assert VERIFY_TASK not in tasks
    # The full deploy ran the start step; the tagged one did not.
    full = {e.get("event_data", {}).get("task") for e in events("awx-deploy")}
    assert run_yml_tasks() & full and not run_yml_tasks() & tasks
    # The same unit as the full deploy wrote: nothing changed, so no restart.
    changed = [d["task"] for d in ran if role_of(d) == "vllm_service" and d["res"].get("changed")]
    assert not changed, changed


def test_the_key_reached_the_node(host) -> None:
    # The positive control of the leak checks: the injected key is the one vLLM uses.
    env = host.file("/etc/vllm/vllm.env")
    assert env.mode == 0o600 and f"VLLM_API_KEY={API_KEY}" in env.content_string


@pytest.mark.parametrize("ident", IDENTS)
@pytest.mark.parametrize("what", sorted(SECRETS))
def test_no_secret_in_runner_artifacts(ident: str, what: str) -> None:
    secret = SECRETS[what].encode()
    files = [p for p in artifacts(ident).rglob("*") if p.is_file()]
    leaks = [str(p) for p in files if secret in p.read_bytes()]
    assert not leaks, f"{what} in {leaks}"
    assert (artifacts(ident) / "stdout").stat().st_size > 0


@pytest.mark.parametrize("what", sorted(SECRETS))
def test_no_secret_in_journal_or_units(host, what: str) -> None:
    secret = SECRETS[what]
    journal = host.run("journalctl --no-pager -o cat")
    assert journal.rc == 0 and journal.stdout
    assert secret not in journal.stdout, f"{what} in the journal"
    units = host.run("cat /etc/systemd/system/vllm*.service /etc/systemd/system/vllm*.d/*.conf")
    assert "ExecStart" in units.stdout
    assert secret not in units.stdout, f"{what} in a unit file"
