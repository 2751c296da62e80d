"""Each role's tasks/assert.yml checks one rule per assert, and its message names the variable.

Types and choices belong to meta/argument_specs.yml (Ansible checks them before the first
task); an assert holds what a spec cannot say, and its fail_msg starts with the variable it is
about, so the error says which input to fix.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from role_cases import role_params

ROOT = Path(__file__).resolve().parents[3]
ROLES = sorted(p for p in (ROOT / "roles").iterdir() if (p / "tasks" / "assert.yml").exists())
COLLECTION_VARS = ("instinct_vllm_stack", "instinct_vllm_stacks_extra")
#: Roles not yet converted, each an xfail that fails (strict) once it is.
_NOT_YET: dict[str, str] = {}


def _asserts(role: Path) -> list[dict]:
    tasks = yaml.safe_load((role / "tasks" / "assert.yml").read_text()) or []
    return [t for t in tasks if "ansible.builtin.assert" in t]


def _options(role: Path) -> set[str]:
    spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())
    return set(spec["argument_specs"]["main"].get("options", {}))


def _role_vars(role: Path) -> dict:
    path = role / "vars" / "main.yml"
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


def _looped_names(task: dict, role_vars: dict) -> list[str] | None:
    """The variable names a task loops over (a literal list, or a list in vars/main.yml)."""
    loop = task.get("loop")
    if isinstance(loop, str):
        ref = re.fullmatch(r"\{\{\s*(\w+)\s*\}\}", loop.strip())
        loop = role_vars.get(ref.group(1)) if ref else None
    return loop if isinstance(loop, list) and all(isinstance(i, str) for i in loop) else None


def _first_word(task: dict) -> str:
    msg = str(task["ansible.builtin.assert"].get("fail_msg", "")).strip()
    if re.match(r"\{\{\s*item\s*\}\}", msg):
        return "{{ item }}"
    return re.split(r"[\s:([]", msg, maxsplit=1)[0]


def _problems(role: Path) -> list[str]:
    names = _options(role) | set(COLLECTION_VARS)
    role_vars = _role_vars(role)
    found = []
    for task in _asserts(role):
        that = task["ansible.builtin.assert"].get("that")
        if not (isinstance(that, str) or (isinstance(that, list) and len(that) == 1)):
            found.append(f"{task['name']!r}: 'that' holds {len(that)} rules, one per assert")
        first = _first_word(task)
        # a loop over variable names may name the variable through {{ item }}
        looped = _looped_names(task, role_vars) if first == "{{ item }}" else None
        if looped is not None and set(looped) <= names:
            continue
        if first not in names:
            found.append(f"{task['name']!r}: fail_msg starts with {first!r}, not a variable")
    return found


@pytest.mark.parametrize("role", role_params(ROLES, _NOT_YET), ids=lambda p: p.name)
def test_one_rule_per_assert_naming_its_variable(role: Path) -> None:
    assert _asserts(role), f"{role.name}: tasks/assert.yml has no assert"
    problems = _problems(role)
    assert not problems, f"{role.name}/tasks/assert.yml: " + "; ".join(problems)
