"""awx scenario: an operator's run from the command line, `ansible-navigator run` with the
settings file the collection ships (ansible-navigator.yml), in the scenario's EE image, against
the same sandbox node over SSH (docs/awx.md, "From the command line: ansible-navigator").

One playbook, preflight (read-only), run from the checkout's root where ansible-navigator finds
the settings file. The command line adds only what an operator adds (the inventory, the SSH
user and key, the survey's stack answer) and what this test host needs: the locally built
image instead of the release's, this host's podman options, a log and playbook artifact in the
job directory instead of the checkout's .navigator/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
JOBS = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "awx-jobs"
ARTIFACT = JOBS / "navigator-preflight.json"
SOURCE = "Settings file"  # ansible-navigator's name for a setting read from ansible-navigator.yml


@pytest.fixture(scope="module")
def navigator_run() -> subprocess.CompletedProcess[str]:
    image = json.loads((JOBS / "ee.json").read_text())["image"]
    bin_dir = Path(sys.executable).parent
    # An operator's shell: none of Molecule's ANSIBLE_* settings, the venv's tools on PATH.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "MOLECULE_"))}
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
    ARTIFACT.unlink(missing_ok=True)
    argv = [
        str(bin_dir / "ansible-navigator"), "run", "playbooks/preflight.yml", "--mode", "stdout",
        "--eei", image,
        # this host's podman (docs/development.md); the host network reaches the node's
        # published SSH port on 127.0.0.1
        "--co=--runtime=runc", "--co=--ulimit=nofile=20000:20000",
        "--co=--ulimit=nproc=32768:32768", "--co=--network=host",
        "--lf", str(JOBS / "navigator.log"), "--pas", str(ARTIFACT),
        "-i", str(REPO / "molecule/awx/inventory/hosts.yml"),
        "-u", "awx", "--private-key", str(JOBS / "id_ed25519"),
        "-e", "instinct_vllm_stack=cpu",
    ]  # fmt: skip
    return subprocess.run(
        argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def artifact(navigator_run: subprocess.CompletedProcess[str]) -> dict:
    assert navigator_run.returncode == 0, navigator_run.stdout + navigator_run.stderr
    return json.loads(ARTIFACT.read_text())


def test_the_playbook_ran_and_printed_its_recap(
    navigator_run: subprocess.CompletedProcess[str], artifact: dict
) -> None:
    assert artifact["status"] == "successful"
    # --mode stdout: ansible-playbook's own output, not the text user interface
    assert "PLAY RECAP" in navigator_run.stdout
    assert "awx-node" in navigator_run.stdout.split("PLAY RECAP", 1)[1]


def test_it_read_the_shipped_settings_file(artifact: dict) -> None:
    sources = artifact["settings_sources"]
    assert sources["settings_file_path"] == str(REPO / "ansible-navigator.yml")
    for key in ("enabled", "container-engine", "pull.policy", "environment-variables.set"):
        assert sources[f"ansible-navigator.execution-environment.{key}"] == SOURCE, key
    ee = artifact["settings_entries"]["ansible-navigator"]["execution-environment"]
    assert ee["enabled"] is True and ee["container-engine"] == "podman"
    assert ee["image"] == json.loads((JOBS / "ee.json").read_text())["image"]


def test_preflight_checked_the_node_and_changed_nothing(artifact: dict) -> None:
    tasks = [t for play in artifact["plays"] for t in play["tasks"]]
    assert {t["host"] for t in tasks} == {"awx-node"}
    assert "instinct.vllm.preflight" in {t.get("resolved_role") for t in tasks}
    assert not [t["task"] for t in tasks if t["__changed"] or t["__result"] == "Failed"]
    # The node's facts came over SSH from the sandbox node.
    gathered = [t for t in tasks if t["task_action"] == "ansible.builtin.setup"]
    assert gathered and gathered[0]["res"]["ansible_facts"]["ansible_hostname"] == "awx-node"
    # The collection came from the checkout (its .collections, first in the settings file's
    # ANSIBLE_COLLECTIONS_PATH), not the image's older copy: the tests run the code under test.
    paths = [t["task_path"] for t in tasks if "/roles/preflight/" in t["task_path"]]
    assert paths and all(p.startswith(str(REPO / ".collections/")) for p in paths), paths
