"""awx scenario: every job template of awx/ and the rollout workflow, run as AWX runs them
(ansible-runner, process isolation in the EE image, surveys and credentials as AWX renders them),
against one sandbox node over SSH."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
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
ROLLED_NAME = "gpt-oss-120B-rollout"  # the served name the approved rollout changes to
# role vllm_service's step that writes the units (the template of vllm.service.j2)
UNIT_TASK = next(t["name"] for t in yaml.safe_load(
    (REPO / "roles/vllm_service/tasks/stage_files.yml").read_text())
    if t.get("ansible.builtin.template", {}).get("src") == "vllm.service.j2")


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
        [
            "podman",
            "run",
            "--rm",
            "--runtime=runc",
            "--ulimit=nofile=20000:20000",
            "--ulimit=nproc=32768:32768",
            "--user=root",
            image,
            "bash",
            "-c",
            "python3 -c 'import openai, matplotlib; print(openai.__version__)'"
            " && ansible-galaxy collection list instinct.vllm && command -v ssh-agent",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "3.57.0" in out and "instinct.vllm" in out and "/usr/bin/ssh-agent" in out


IDENTS = [
    "awx-preflight",
    "awx-deploy",
    "awx-deploy-unit",
    "awx-verify",
    "awx-acceptance",
    "awx-benchmark",
    "awx-diagnose",
    # the jobs of the approved rollout workflow, and the denied one's only job
    "awx-rollout-preflight",
    "awx-rollout-rolling-update",
    "awx-rollout-verify",
    "awx-rollout-denied-preflight",
]


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
    facts = [
        e
        for e in events("awx-deploy")
        if e["event"] == "runner_on_ok" and e["event_data"].get("task") == "Gathering Facts"
    ]
    assert facts
    assert facts[0]["event_data"]["res"]["ansible_facts"]["ansible_hostname"] == "awx-node"


def verify_result(ident: str) -> dict:
    results = [
        e["event_data"]["res"]
        for e in events(ident)
        if e["event"] == "runner_on_ok" and e["event_data"].get("task") == VERIFY_TASK
    ]
    assert len(results) == 1, f"{ident}: the verify check did not report once"
    checks = {c["name"]: c for c in results[0]["checks"]}
    # Every check ran and passed: a real (and a streamed) completion came back, and the
    # endpoint refused a client without the key.
    assert set(checks) == {"health", "models", "chat", "chat_stream", "tokenize", "auth_required"}
    assert all(c["ok"] for c in checks.values()), checks
    return results[0]


def test_verify_talked_to_vllm() -> None:
    assert verify_result("awx-verify")["model"] == "gpt-oss-120B"  # the survey's default


def extravars(ident: str) -> dict:
    return json.loads((Path(summary(ident)["private_data_dir"]) / "env/extravars").read_text())


def node_tasks(ident: str) -> list[dict]:
    return [
        e["event_data"]
        for e in events(ident)
        if e["event"] in ("runner_on_ok", "runner_on_skipped", "runner_on_failed")
    ]


def publish_tasks(role: str = "vllm_service") -> set[str]:
    """Task names of a role's entry point publish (its facts, worked out on the controller, no
    change on the node): vllm_service's serving facts, vllm's venv python, model's place."""
    tasks = yaml.safe_load((REPO / f"roles/{role}/tasks/publish.yml").read_text())
    return {t["name"] for t in tasks if "name" in t}


# The roles that publish facts (entry point publish) and the internal roles that include them.
FACT_ROLES = {"vllm_service_facts", "vllm_service", "vllm_facts", "vllm", "model_facts", "model",
              "rocm_facts", "rocm", "fleet_pki_facts", "fleet_pki"}


def pki_done(ident: str) -> set[str]:
    """The tasks of role fleet_pki that did run in a job (with instinct_vllm_tls off its other
    steps are skipped): only its publish may."""
    return {
        e["event_data"]["task"] for e in events(ident)
        if e["event"] == "runner_on_ok" and role_of(e["event_data"]) == "fleet_pki"
        and not e["event_data"]["task"].startswith("Validating arguments")
    }


def test_preflight_only_checked() -> None:
    """playbooks/preflight.yml: roles stack and preflight, and the facts preflight reads -
    vllm_service's (the server's flags), vllm's (the venv) and model's (where the model goes),
    each through its entry point publish; nothing changed."""
    ran = node_tasks("awx-preflight")
    roles = {role_of(d) for d in ran}
    assert roles == {"stack", "preflight"} | FACT_ROLES, roles
    for role in ("vllm_service", "vllm", "model", "rocm"):
        done = {d["task"] for d in ran if role_of(d) == role}
        done = {t for t in done if not t.startswith("Validating arguments")}
        assert done and done <= publish_tasks(role), (role, done)
    assert pki_done("awx-preflight") == publish_tasks("fleet_pki")
    assert not [d["task"] for d in ran if d.get("res", {}).get("changed")]
    assert extravars("awx-preflight")["instinct_vllm_stack"] == "cpu"


def project_dir(ident: str) -> Path:
    """/runner/project of the job: where the playbooks' controller-side results land."""
    return Path(summary(ident)["private_data_dir"]) / "project"


def test_acceptance_report_and_artifacts() -> None:
    report = json.loads(
        (project_dir("awx-acceptance") / "acceptance-reports/awx-node.json").read_text()
    )
    assert report["status"] == "ok", report
    checks = report["checks"]
    assert checks["serve"]["status"] == "ok" and checks["vllm_platform"]["status"] == "ok"
    assert checks["gpu_matmul"]["status"] == "skipped"  # no GPU on a cpu stack
    assert "fingerprint" not in checks  # the job's skip tags (the serving scenario runs it)
    # What AWX keeps of the job (set_stats): the node's verdict.
    assert summary("awx-acceptance")["artifacts"] == {
        "instinct_vllm_acceptance": {"awx-node": {"status": "ok", "summary": report["summary"]}}
    }


def test_benchmark_ran_with_the_launch_vars_and_passed_its_gate() -> None:
    assert extravars("awx-benchmark")["benchmark_concurrency"] == [1, 2]
    result = summary("awx-benchmark")["artifacts"]["instinct_vllm_benchmark"]
    assert result["passed"] is True and result["violations"] == []
    run = project_dir("awx-benchmark") / "instinct-benchmark" / result["run"]
    raw = sorted((run / "raw").glob("*.json"))
    assert len(raw) == 2, raw  # one result per concurrency level
    done = json.loads((run / "summary.json").read_text())
    assert done["meta"]["concurrency"] == [1, 2]


def test_diagnose_archive_has_a_verdict_and_no_secret() -> None:
    result = summary("awx-diagnose")["artifacts"]["instinct_vllm_diagnose"]
    assert result["primary"] == {"awx-node": "unknown"}  # a healthy node: no failure class
    archive = project_dir("awx-diagnose") / Path(result["archive"]).relative_to("/runner/project")
    with tarfile.open(archive) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    assert any(name.endswith("verdict.json") for name in members), sorted(members)
    for what, secret in SECRETS.items():
        assert not [n for n, data in members.items() if secret.encode() in data], what


def workflow(ident: str) -> dict:
    return json.loads((JOBS / f"{ident}.json").read_text())


def test_the_approved_rollout_ran_every_step() -> None:
    run = workflow("awx-rollout")
    assert run["status"] == "successful", run
    steps = [(n["identifier"], n["status"]) for n in run["nodes"]]
    assert steps == [
        ("preflight", "successful"),
        ("approve", "successful"),
        ("rolling-update", "successful"),
        ("verify", "successful"),
    ]


def test_the_workflow_survey_reached_every_job() -> None:
    """The workflow's answers sit above each job template's own survey defaults."""
    for ident in ("awx-rollout-preflight", "awx-rollout-rolling-update", "awx-rollout-verify"):
        got = extravars(ident)
        assert got["vllm_service_served_model_name"] == ROLLED_NAME, ident
        assert (got["instinct_vllm_stack"], got["model_source"]) == ("cpu", "demo"), ident
    assert extravars("awx-rollout-rolling-update")["instinct_vllm_serial"] == 1


def test_the_rollout_restarted_the_engine_with_the_change(host) -> None:
    before = (JOBS / "mainpid-before-rollout").read_text().strip()
    after = host.run("systemctl show --property=MainPID --value vllm").stdout.strip()
    assert before not in ("", "0") and after not in ("", "0", before)
    unit = host.file("/etc/systemd/system/vllm.service").content_string
    assert "--served-model-name" in unit and ROLLED_NAME in unit
    stats = summary("awx-rollout-rolling-update")["artifacts"]
    assert stats["instinct_vllm_rollout"] == {"awx-node": "updated"}
    # The default gate fingerprint ran and passed; with one node, no peer is left unchanged to
    # agree with: the consensus is skipped and says so (never a pass).
    gate = stats["instinct_vllm_fingerprint"]["awx-node"]
    assert gate["ok"] and gate["baseline"].startswith("/var/lib/instinct-vllm/fingerprints/"), gate
    assert gate["consensus"].startswith("skipped: no node is left unchanged"), gate
    # The one node is the canary: its gate benchmark ran, the first, so without a baseline.
    canary = stats["instinct_vllm_benchmark"]
    assert canary["passed"] is True and canary["violations"] == [], canary
    assert canary["baseline"] is None, canary
    assert set(stats) <= {"instinct_vllm_rollout", "instinct_vllm_fingerprint",
                          "instinct_vllm_fingerprint_baselines", "instinct_vllm_benchmark"}
    # The workflow's verify asked for the new name, and every check passed.
    assert verify_result("awx-rollout-verify")["model"] == ROLLED_NAME


def test_a_denied_approval_stops_the_rollout() -> None:
    run = workflow("awx-rollout-denied")
    assert run["status"] == "failed"
    steps = [(n["identifier"], n["status"]) for n in run["nodes"]]
    assert steps == [("preflight", "successful"), ("approve", "failed")]
    assert not (JOBS / "awx-rollout-denied-rolling-update").exists()


def role_of(data: dict) -> str:
    return data.get("role", "").removeprefix("instinct.vllm.")


def run_yml_tasks() -> set[str]:
    tasks = yaml.safe_load((REPO / "roles/vllm_service/tasks/run.yml").read_text())
    return {t["name"] for t in tasks if "name" in t and "block" not in t}


def test_skip_tags_skipped_the_model_check() -> None:
    """deploy with skip tags vllm_contract: vLLM's model check did not run, the rest did."""
    tasks = {
        e["event_data"].get("task")
        for e in events("awx-deploy")
        if e["event"] in ("runner_on_ok", "runner_on_skipped")
    }
    contract = yaml.safe_load((REPO / "roles/vllm/tasks/contract.yml").read_text())
    names = {t["name"] for t in contract if "name" in t and "block" not in t}
    assert names and not names & tasks
    assert UNIT_TASK in tasks


def test_job_tags_ran_the_unit_part_only() -> None:
    """deploy with job tags vllm_service_unit: role stack (always), vllm_service's input
    checks and its unit step; nothing of preflight, vllm, model, the service start, verify."""
    # Ansible's own argument validation of each included role is tagged always too.
    ran = [
        d
        for d in node_tasks("awx-deploy-unit")
        if not d["task"].startswith("Validating arguments against arg spec")
    ]
    # node: the node sequence's include steps; vllm_service_facts: the published facts
    assert {role_of(d) for d in ran} <= {"", "node", "stack"} | FACT_ROLES, {
        role_of(d) for d in ran}
    # of role vllm only its facts: vllm_attention (tasks/attention.yml, tagged always: the
    # unit's environment is rendered from it) and the venv's python; of role model its place
    attention = yaml.safe_load((REPO / "roles/vllm/tasks/attention.yml").read_text())
    allowed = {t["name"] for t in attention if "name" in t} | publish_tasks("vllm")
    assert {d["task"] for d in ran if role_of(d) == "vllm"} <= allowed
    assert {d["task"] for d in ran if role_of(d) == "model"} <= publish_tasks("model")
    assert pki_done("awx-deploy-unit") <= publish_tasks("fleet_pki")
    tasks = {d["task"] for d in ran}
    assert UNIT_TASK in tasks
    assert any(role_of(d) == "stack" for d in ran)
    assert VERIFY_TASK not in tasks
    # The full deploy ran the start step; the tagged one did not.
    full = {e.get("event_data", {}).get("task") for e in events("awx-deploy")}
    assert run_yml_tasks() & full and not run_yml_tasks() & tasks
    # The same unit as the full deploy wrote: nothing changed, so no restart.
    changed = [
        d["task"] for d in ran
        if role_of(d) == "vllm_service" and d.get("res", {}).get("changed")
    ]
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
