"""scripts/aap-config-spec: the extract of infra.aap_configuration that test_awx_config.py checks
awx/ against, made from a small git repository shaped like the collection."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[3]
aap = load_script("aap_config_spec", ROOT / "scripts" / "aap-config-spec", reuse=True)

SPEC = """---
argument_specs:
  main:
    options:
      controller_templates:
        type: list
        elements: dict
        # options:
        #   name:
        #     required: true
        #     type: str
        #   verbosity:
        #     type: int
        #     choices:
        #       - 0
        #       - 1
      controller_configuration_job_templates_secure_logging:
        # not an object option
        type: bool
"""
TASKS = """---
- name: Managing
  job_template:
    name: "{{ __item.name | mandatory }}"
    verbosity: "{{ __item.verbosity | default(omit) }}"
    survey_spec: "{{ __item.related.survey_spec | default(__item.survey_spec) }}"
    other: "{{ __other.not_an_item_field }}"
  loop: "{{ controller_templates }}"
  loop_control:
    loop_var: __item
"""
NODE_TASKS = """---
- name: Nodes
  workflow_job_template_node:
    identifier: "{{ __workflow_loop_node_item.identifier }}"
    workflow: "{{ __workflow_loop_item.name }}"
"""


def test_commented_options_are_the_object_options() -> None:
    assert aap.commented_options(SPEC) == {
        "name": {"required": True, "type": "str"},
        "verbosity": {"type": "int", "choices": [0, 1]},
    }


def test_fields_read_are_those_of_the_loop_item() -> None:
    assert aap.fields_read(TASKS) == ["name", "related", "survey_spec", "verbosity"]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def collection(tmp_path: Path) -> Path:
    files = {
        "galaxy.yml": "namespace: infra\nname: aap_configuration\nversion: 9.9.9\n",
        "roles/dispatch/defaults/main.yml": yaml.safe_dump({
            "controller_configuration_dispatcher_roles": [
                {"role": "controller_job_templates", "var": "controller_templates", "tags": "t"},
                {"role": "controller_workflow_job_templates", "var": "controller_workflows"},
            ]
        }),
        "roles/controller_job_templates/meta/argument_specs.yml": SPEC,
        "roles/controller_job_templates/tasks/main.yml": TASKS,
        "roles/controller_workflow_job_templates/meta/argument_specs.yml": SPEC,
        "roles/controller_workflow_job_templates/tasks/main.yml": TASKS,
        "roles/controller_workflow_job_templates/tasks/add_workflows_schema.yml": NODE_TASKS,
    }  # fmt: skip
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    return tmp_path / ".git"


def test_render_records_the_commit_and_what_the_roles_read(
    collection: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        aap, "ROLES", ("controller_job_templates", "controller_workflow_job_templates")
    )
    text = aap.render(collection, "HEAD")
    data = yaml.safe_load(text)
    commit = subprocess.run(
        ["git", "--git-dir", str(collection), "rev-parse", "HEAD"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    assert (data["commit"], data["version"]) == (commit, "9.9.9")
    assert f"at commit {commit}" in text.split("\nsource:")[0]  # the header
    assert data["dispatch"][0] == {
        "var": "controller_templates",
        "role": "controller_job_templates",
    }
    templates = data["roles"]["controller_job_templates"]
    assert templates["reads"] == ["name", "related", "survey_spec", "verbosity"]
    assert "node_reads" not in templates
    assert data["roles"]["controller_workflow_job_templates"]["node_reads"] == ["identifier"]


def test_the_checked_in_extract_is_what_the_script_writes() -> None:
    """Its header and body are the script's output format (a hand edit shows here)."""
    text = aap.OUT.read_text()
    data = yaml.safe_load(text)
    body = aap.dump({k: data[k] for k in ("source", "commit", "version", "dispatch", "roles")})
    assert text.startswith("---\n") and text.endswith(body)
    assert set(data["roles"]) == set(aap.ROLES)
