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


def _problems(role: Path) -> list[str]:
    names = _options(role) | set(COLLECTION_VARS)
    found = []
    for task in _asserts(role):
        args = task["ansible.builtin.assert"]
        that = args.get("that")
        if not (isinstance(that, str) or (isinstance(that, list) and len(that) == 1)):
            found.append(f"{task['name']!r}: 'that' holds {len(that)} rules, one per assert")
        first = re.split(r"[\s:(]", str(args.get("fail_msg", "")).strip(), maxsplit=1)[0]
        if first not in names:
            found.append(f"{task['name']!r}: fail_msg starts with {first!r}, not a variable")
    return found


@pytest.mark.parametrize("role", role_params(ROLES, _NOT_YET), ids=lambda p: p.name)
def test_one_rule_per_assert_naming_its_variable(role: Path) -> None:
    assert _asserts(role), f"{role.name}: tasks/assert.yml has no assert"
    problems = _problems(role)
    assert not problems, f"{role.name}/tasks/assert.yml: " + "; ".join(problems)
