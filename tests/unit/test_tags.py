"""Tags per role and phase (docs/awx.md "Tags"): every step of every role is tagged, and
`--tags <phase>` selects that phase only (plus what is tagged always: role stack, argument
validation), as `ansible-playbook --list-tasks` shows. AWX's job tags and skip tags are the
same flags."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = ("preflight", "rocm", "vllm", "model", "firewall", "vllm_service", "gateway", "monitoring")
LISTED = re.compile(r"^\s{6}(?:(?P<role>[\w.]+) : )?(?P<name>.+?)\tTAGS: \[(?P<tags>[^\]]*)\]$")


def node_sequence() -> list[dict]:
    """Role node: the node sequence site.yml and role rollout include (its entry points stage,
    then switch; tasks/main.yml imports both)."""
    tasks = ROOT / "roles" / "node" / "tasks"
    return [task for entry in ("stage.yml", "switch.yml")
            for task in yaml.safe_load((tasks / entry).read_text())]


def main_tasks(role: str) -> list[dict]:
    return yaml.safe_load((ROOT / "roles" / role / "tasks" / "main.yml").read_text())


def role_tags(role: str) -> set[str]:
    """The tags role's tasks/main.yml uses, and those the node sequence applies to its includes."""
    tags = {t for task in main_tasks(role) for t in task.get("tags", [])}
    for task in node_sequence():
        include = task.get("ansible.builtin.include_role", {})
        if include.get("name") == f"instinct.vllm.{role}":
            tags |= set(include.get("apply", {}).get("tags", []))
    return tags


def list_tasks(playbook: Path, *flags: str) -> list[tuple[str, str, set[str]]]:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
           "ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".collections")}
    out = subprocess.run(
        ["ansible-playbook", "-i", "localhost,", "--list-tasks", str(playbook), *flags],
        check=True, capture_output=True, text=True, env=env, cwd=ROOT,
    ).stdout
    rows = []
    for line in out.splitlines():
        if m := LISTED.match(line):
            tags = {t.strip() for t in m["tags"].split(",") if t.strip()}
            rows.append(((m["role"] or "").removeprefix("instinct.vllm."), m["name"], tags))
    return rows


@pytest.fixture(scope="module")
def all_roles(tmp_path_factory) -> Path:
    """A playbook that imports every role statically, so --list-tasks shows each task."""
    path = tmp_path_factory.mktemp("tags") / "all_roles.yml"
    path.write_text(yaml.safe_dump([{
        "name": "All roles", "hosts": "all", "gather_facts": False,
        "tasks": [{"name": f"Role {r}",
                   "ansible.builtin.import_role": {"name": f"instinct.vllm.{r}"}} for r in ROLES],
    }]))
    return path


def task_names(role: str, tasks_file: str) -> set[str]:
    return {t["name"] for t in yaml.safe_load(
        (ROOT / "roles" / role / "tasks" / tasks_file).read_text())
        if "name" in t and "block" not in t}


@pytest.mark.parametrize("role", ROLES)
def test_every_step_of_a_role_is_tagged_with_the_role_and_a_phase(role: str) -> None:
    for task in main_tasks(role):
        tags = task.get("tags", [])
        assert role in tags, f"roles/{role}/tasks/main.yml: {task['name']!r} lacks tag {role}"
        if role != "preflight":  # preflight is one phase, read-only
            assert set(tags) - {role}, f"{task['name']!r} has no phase tag"
        include = task.get("ansible.builtin.include_tasks")
        if isinstance(include, dict):  # a dynamic include passes its tags on with apply
            assert set(include.get("apply", {}).get("tags", [])) == set(tags), task["name"]


def test_role_stack_always_runs() -> None:
    assert all("always" in t.get("tags", []) for t in main_tasks("stack"))


@pytest.mark.parametrize(
    ("phase", "role", "included", "excluded"),
    [
        ("vllm_service_unit", "vllm_service", "stage_files.yml", "run.yml"),
        ("vllm_service_unit", "vllm_service", "install.yml", "check_flags.yml"),
        ("vllm_service_run", "vllm_service", "run.yml", "install.yml"),
        ("model_convert", "model", "convert.yml", "verify.yml"),
        ("rocm_driver", "rocm", "driver.yml", "packages.yml"),
        ("vllm_verify", "vllm", "verify.yml", "lock.yml"),
    ],
)
def test_a_phase_tag_runs_that_part_only(
    all_roles: Path, phase: str, role: str, included: str, excluded: str
) -> None:
    listed = list_tasks(all_roles, "--tags", phase)
    names = {name for r, name, _tags in listed if r == role}
    assert task_names(role, included) <= names, f"--tags {phase} misses {included}"
    assert not task_names(role, excluded) & names, f"--tags {phase} runs {excluded}"
    for r, name, tags in listed:
        assert phase in tags or "always" in tags, f"{r} : {name} runs under --tags {phase}"
    # Role stack resolves the stack first, whatever the selection.
    assert any(r == "stack" and "Resolve the stack" in name for r, name, _tags in listed)


def test_preflight_playbook_runs_preflight_only() -> None:
    playbook = ROOT / "playbooks" / "preflight.yml"
    listed = list_tasks(playbook, "--tags", "preflight")
    assert task_names("preflight", "check.yml") <= {n for r, n, _tags in listed if r == "preflight"}
    # preflight's dependencies (the stack, the serving facts, where the model goes, role vllm's
    # variables, role rocm's facts); --list-tasks names no role for an include_role: role
    # vllm_service_facts' include of role vllm_service's publish, role model_facts' of role
    # model's, role vllm_facts' of role vllm's, role rocm_facts' of role rocm's
    assert {entry[0] or entry[1] for entry in listed} == {
        "stack", "vllm_service_facts", "model_facts", "vllm_facts", "rocm_facts", "preflight",
        "Publish the node's serving facts (role vllm_service, entry point publish)",
        "Publish where the model goes (role model, entry point publish)",
        "Publish the virtualenv's python (role vllm, entry point publish)",
        "Publish role rocm's facts (role rocm, entry point publish)"}
    skipped = list_tasks(playbook, "--skip-tags", "preflight")
    assert not [n for r, n, _tags in skipped if r == "preflight"]


def test_node_sequence_includes_let_tags_reach_the_roles() -> None:
    """Ansible skips an untagged include_role under --tags, and with it the whole role."""
    includes = [t for t in node_sequence() if "ansible.builtin.include_role" in t]
    assert len(includes) >= 5
    for task in includes:
        assert "always" in task.get("tags", []), task["name"]
    verify = yaml.safe_load((ROOT / "playbooks" / "verify.yml").read_text())
    assert all("verify" in t.get("tags", []) for t in verify[0]["tasks"])


def docs_table() -> dict[str, set[str]]:
    """docs/awx.md's tag table: | role | `tag`, `tag`... |."""
    text = (ROOT / "docs" / "awx.md").read_text().split("### Tags", 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].strip("`") in ROLES:
            rows[cells[0].strip("`")] = set(re.findall(r"`([a-z_]+)`", cells[1]))
    return rows


@pytest.mark.parametrize("role", ROLES)
def test_docs_and_readmes_name_every_phase_tag(role: str) -> None:
    tags = role_tags(role)
    assert docs_table().get(role) == tags, f"docs/awx.md's tag table for {role}"
    readme = (ROOT / "roles" / role / "README.md").read_text()
    missing = sorted(t for t in tags if f"`{t}`" not in readme)
    assert not missing, f"roles/{role}/README.md does not name {missing}"
