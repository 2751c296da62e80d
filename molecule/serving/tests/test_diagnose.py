"""serving scenario: playbooks/diagnose.yml against the serving node (cpu stack: no ROCm
tools). It must leave one archive on the controller without the API key in any file, record
the missing tools as such, and give the node a verdict."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "playbooks" / "diagnose.yml"
KEY = "serving-scenario-key-9f3c27d1e8b4"


def test_archive_without_the_key_and_a_verdict(tmp_path, ansible_run, podman_hostvars):
    hosts = {
        "serving-node": podman_hostvars(
            "serving-node", instinct_vllm_stack="cpu", vllm_service_api_key=KEY,
            vllm_service_model="/srv/models/demo-gptoss-legacy",
        )
    }
    run = ansible_run(
        PLAYBOOK,
        hosts,
        extravars={
            "instinct_vllm_hosts": "all",
            "diagnose_output_dir": str(tmp_path),
            # torch only: vllm's import takes a minute on the sandbox's 2 cores
            "diagnose_probe_imports": ["torch"],
        },
    )
    assert run.rc == 0, run.failure_messages()
    archives = list(tmp_path.glob("*/diagnose-*.tar.gz"))
    assert len(archives) == 1
    with tarfile.open(archives[0]) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    assert not [name for name, data in files.items() if KEY.encode() in data]
    env_file = files["diagnose/serving-node/env_file.txt"].decode()
    assert "VLLM_API_KEY=<redacted" in env_file
    index = json.loads(files["diagnose/serving-node/collectors.json"])
    status = {c["name"]: c["status"] for c in index["collectors"]}
    assert status["rocminfo"] == "missing"  # no ROCm on the cpu stack: recorded, not fatal
    assert status["unit_journal"] == "ok" and status["pip_freeze"] == "ok"
    versions = json.loads(files["diagnose/serving-node/versions.txt"].decode().split("\n--- ")[0])
    assert versions["dists"]["vllm"].endswith("+cpu") and versions["torch"]["hip"] is None
    verdict = json.loads(files["diagnose/serving-node/verdict.json"])
    assert verdict["service"] == "active"
    assert verdict["primary"] == "unknown" and verdict["findings"] == []  # a healthy node
    assert "amdgpu_not_loaded" in verdict["skipped"]
    summary = files["diagnose/SUMMARY.md"].decode()
    assert "Verdict: unknown" in summary and "rocminfo (missing)" in summary
