"""Every wheelhouse a Molecule scenario fills is filled under the lock its hosts install with.

A scenario's hosts install offline (--no-index) from a shared wheelhouse, under the stack's lock
as constraints (role vllm). A wheelhouse downloaded without that lock holds whatever PyPI serves
that day, and the hosts' install becomes impossible ("ResolutionImpossible") once PyPI moves on.
So: `pip download` appears in one place only (molecule/shared/fill-wheelhouse.yml), always with
--constraint, and every caller passes a constraints file and a stamp key.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MOLECULE = ROOT / "molecule"
FILL = MOLECULE / "shared" / "fill-wheelhouse.yml"


def tasks_of(path: Path) -> list[dict]:
    """Every task of a playbook or task file, blocks flattened."""
    data = yaml.safe_load(path.read_text()) or []
    out: list[dict] = []

    def walk(items: list) -> None:
        for item in items or []:
            if not isinstance(item, dict):
                continue
            out.append(item)
            for key in ("tasks", "pre_tasks", "post_tasks", "handlers", "block", "rescue",
                        "always"):
                walk(item.get(key, []))

    walk(data)
    return out


def argv_of(task: dict) -> list[str]:
    for key in ("ansible.builtin.command", "ansible.builtin.shell", "command", "shell"):
        value = task.get(key)
        if isinstance(value, dict):
            return [str(a) for a in value.get("argv", [])] + str(value.get("cmd", "")).split()
        if isinstance(value, str):
            return value.split()
    return []


def downloads_in(path: Path) -> list[str]:
    """Names of the tasks that run `pip download`."""
    found = []
    for task in tasks_of(path):
        argv = argv_of(task)
        if "pip" in argv and "download" in argv:
            found.append(task.get("name", "?"))
    return found


YAML_FILES = sorted(MOLECULE.rglob("*.yml"))


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(MOLECULE)))
def test_pip_download_only_in_the_shared_fill(path):
    if path == FILL:
        return
    assert downloads_in(path) == [], (
        f"{path.relative_to(ROOT)} downloads wheels itself: include "
        "molecule/shared/fill-wheelhouse.yml with the stack's lock as _wh_constraints"
    )


def test_the_shared_fill_downloads_under_constraints():
    (task,) = [t for t in tasks_of(FILL) if downloads_in_task(t)]
    argv = argv_of(task)
    assert "--constraint" in argv
    assert argv[argv.index("--constraint") + 1].endswith("/constraints.txt")
    # scenarios side by side may fill the same wheelhouse: one pip at a time
    assert argv[:2] == ["flock", "{{ _wh_dir }}/.fill.lock"]
    assert "_wh_key" in task["ansible.builtin.command"]["creates"]


def downloads_in_task(task: dict) -> bool:
    argv = argv_of(task)
    return "pip" in argv and "download" in argv


def fill_includes() -> list[tuple[Path, dict]]:
    found = []
    for path in YAML_FILES:
        for task in tasks_of(path):
            include = task.get("ansible.builtin.include_tasks")
            if include and str(include).endswith("fill-wheelhouse.yml"):
                found.append((path, task.get("vars", {})))
    return found


def test_every_fill_names_its_constraints_and_key():
    includes = fill_includes()
    assert len(includes) >= 3  # cpu (serving, awx, fleet), vllm-source, model
    for path, variables in includes:
        where = path.relative_to(ROOT)
        assert variables.get("_wh_constraints"), f"{where}: no _wh_constraints"
        assert "_wh_constraints" in str(variables.get("_wh_key", "")) or "lock" in str(
            variables.get("_wh_key", "")
        ), f"{where}: the stamp key does not include the constraints"


def test_stack_wheelhouses_use_the_stack_lock():
    """The vLLM stacks' fills read files/locks/<stack lock>: the file the hosts install with."""
    stacks = yaml.safe_load((ROOT / "files" / "stacks.yml").read_text())["stacks"]
    cpu = (MOLECULE / "shared" / "cpu-wheelhouse.yml").read_text()
    assert "files/locks/{{ _cw_stack.lock.file }}" in cpu
    assert "stacks[_cw_name]" in cpu and "_cw_stack_name | default('cpu')" in cpu
    assert stacks["cpu"]["lock"]["file"] == "cpu.txt"
    twin = (MOLECULE / "rocm7-twin" / "prepare.yml").read_text()
    assert "../shared/cpu-wheelhouse.yml" in twin and "_cw_stack_name: sandbox-rocm-7.2.3" in twin
    assert stacks["sandbox-rocm-7.2.3"]["lock"]["file"] == "sandbox-rocm-7.2.3.txt"
    source = (MOLECULE / "vllm-source" / "prepare.yml").read_text()
    assert f"files/locks/{stacks['sandbox-rocm-6.2.1']['lock']['file']}" in source


@pytest.mark.parametrize("scenario", ["serving", "awx", "fleet"])
def test_cpu_scenarios_fill_through_the_locked_playbook(scenario):
    text = (MOLECULE / scenario / "prepare.yml").read_text()
    assert "../shared/cpu-wheelhouse.yml" in text or "../serving/prepare.yml" in text
