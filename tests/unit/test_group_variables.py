"""One variable per inventory group, one default: every role and playbook names the vLLM nodes
by instinct_vllm_hosts, the gateways by instinct_vllm_gateway_group and the Prometheus hosts by
monitoring_server_group. A role that reads one declares it in its argument_specs; a playbook's
`hosts:` is templated before any role is loaded, so it restates the default as
`| default('<group>')`: all of them must agree."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
VARIABLES = ("instinct_vllm_hosts", "instinct_vllm_gateway_group", "monitoring_server_group")
DEFAULTED = re.compile(r"\b(\w+)\s*\|\s*default\(\s*['\"]([\w-]+)['\"]\s*\)")
LITERAL_GROUP = re.compile(
    r"groups\[\s*['\"]|^\s*-?\s*hosts:\s*['\"]?(vllm_nodes|gateways?|monitoring)\b", re.M)
SOURCES = ("roles", "playbooks", "site.yml")


def _files() -> list[Path]:
    found: list[Path] = []
    for source in SOURCES:
        path = ROOT / source
        if path.is_file():
            found.append(path)
        else:
            found += sorted(path.rglob("*.yml")) + sorted(path.rglob("*.j2"))
    return found


def _spec_defaults() -> dict[str, set[tuple[str, str]]]:
    """variable -> {(default, role)} for every group variable a role's argument_specs declares."""
    out: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for spec in sorted((ROOT / "roles").glob("*/meta/argument_specs.yml")):
        for entry in (yaml.safe_load(spec.read_text())["argument_specs"] or {}).values():
            for name, option in (entry.get("options") or {}).items():
                if name in VARIABLES:
                    out[name].add((option.get("default"), spec.parts[-3]))
    return out


def _group_names() -> set[str]:
    return {default for found in _spec_defaults().values() for default, _role in found}


def test_each_group_variable_has_one_default_in_the_role_specs() -> None:
    specs = _spec_defaults()
    for name, found in specs.items():
        assert len({default for default, _role in found}) == 1, f"{name}: defaults {sorted(found)}"
    assert set(specs) >= {"instinct_vllm_hosts", "monitoring_server_group"}


def test_no_other_variable_names_a_group() -> None:
    """A role option whose default is one of the groups is one of the group variables (no
    gateway_node_group, monitoring_vllm_group, ... beside them)."""
    groups = _group_names()
    for spec in sorted((ROOT / "roles").glob("*/meta/argument_specs.yml")):
        for entry in (yaml.safe_load(spec.read_text())["argument_specs"] or {}).values():
            for name, option in (entry.get("options") or {}).items():
                if isinstance(option.get("default"), str) and option["default"] in groups:
                    assert name in VARIABLES, f"{spec.relative_to(ROOT)}: {name} names a group"


def test_playbooks_and_roles_restate_the_spec_defaults_only() -> None:
    """Every `<group variable> | default('x')` uses the one default; no other variable defaults
    to a group's name; no task or play names a group literally."""
    specs = {name: next(iter(found))[0] for name, found in _spec_defaults().items()}
    seen: dict[str, set[str]] = defaultdict(set)
    groups = _group_names() | {"gateways"}
    for path in _files():
        text = path.read_text()
        where = path.relative_to(ROOT)
        for name, default in DEFAULTED.findall(text):
            if name in VARIABLES:
                seen[name].add(default)
                said = f"{where}: {name} | default('{default}')"
                assert specs.get(name, default) == default, said
            else:
                assert default not in groups, f"{where}: {name} | default('{default}'): a group"
        literal = LITERAL_GROUP.search(text)
        assert not literal, f"{where}: names a group literally ({literal.group(0).strip()})"
    for name, defaults in seen.items():
        assert len(defaults) == 1, f"{name} defaults to {sorted(defaults)} in the playbooks"
