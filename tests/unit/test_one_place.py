"""Each fact in one place: a role reads another role's choices from what that role publishes
(vllm_service_resolved, model_resolved, gateway_resolved, rocm_resolved, ...) or from the
variable itself where a dependency defines it - never by restating the owner's default.

Scanned: every role's tasks, templates, handlers, defaults and vars. A restatement is
- `<variable> | default(...)` (also `hostvars[h].<variable> | default(...)`) where the variable
  is another role's: declared in that role's defaults/main.yml or argument_specs (role
  variables carry the role's name as prefix; the collection-wide instinct_vllm_* ones are
  declared by the roles that read them), and not by the reader itself;
- a literal copy of another role's default: a path, or a port (a variable named *_port), in
  `default(...)` or as a value in the reader's defaults and vars.
ALLOWED lists the few legitimate ones, each with its reason."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"
SCANNED = ("tasks", "templates", "handlers", "defaults", "vars")
DEFAULTED = re.compile(r"\b([a-z][a-z0-9_]*)\s*\|\s*default\(")
LITERAL = re.compile(r"default\(\s*(?:'([^']*)'|\"([^\"]*)\"|(\d+))\s*\)")

# (reader role, variable): why its `| default(` is no restatement. Secrets are never published
# as facts (a fact is printed by -v): a reader takes them from the inventory, where they may be
# absent.
ALLOWED: dict[tuple[str, str], str] = {
    ("benchmark", "gateway_api_keys"): "a secret: the first gateway's client keys (inventory)",
    ("gateway", "vllm_service_api_key"): "a secret: the nodes' key (the gateway's inventory)",
    ("monitoring", "vllm_service_api_key"): "a secret: the nodes' key (Prometheus' inventory)",
    ("fingerprint_gate", "vllm_service_api_key"): "a secret: a peer's own key, else the play's",
    ("diagnose", "model_hf_token"): "a secret: kept out of the archive when the inventory sets it",
}
# Values no role owns though several default to them: the distribution's own python.
SHARED_VALUES = {"/usr/bin/python3"}


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text()) if path.is_file() else None


def _roles() -> list[str]:
    return sorted(p.name for p in ROLES.iterdir() if (p / "meta" / "main.yml").is_file())


def _declared() -> dict[str, set[str]]:
    """variable -> the roles that declare it (defaults/main.yml, argument_specs options)."""
    owners: dict[str, set[str]] = defaultdict(set)
    for role in _roles():
        for name in _yaml(ROLES / role / "defaults" / "main.yml") or {}:
            owners[name].add(role)
        spec = _yaml(ROLES / role / "meta" / "argument_specs.yml") or {}
        for entry in (spec.get("argument_specs") or {}).values():
            for name in entry.get("options") or {}:
                owners[name].add(role)
    return owners


def _distinct(name: str, value: Any) -> bool:
    """A default whose copy elsewhere is a restatement: a path, or a port."""
    if isinstance(value, str):
        return value.startswith("/") and "{{" not in value and value not in SHARED_VALUES
    return isinstance(value, int) and not isinstance(value, bool) and name.endswith("_port")


def _owned_values() -> dict[Any, set[tuple[str, str]]]:
    """distinctive default value -> {(role, variable)} whose default it is."""
    values: dict[Any, set[tuple[str, str]]] = defaultdict(set)
    for role in _roles():
        for name, value in (_yaml(ROLES / role / "defaults" / "main.yml") or {}).items():
            if _distinct(name, value):
                values[value].add((role, name))
    return values


def _files(role: str) -> list[tuple[str, Path]]:
    found = []
    for part in SCANNED:
        base = ROLES / role / part
        if base.is_dir():
            found += [(part, path) for path in sorted(base.rglob("*")) if path.is_file()]
    return found


def _scalars(data: Any) -> list[tuple[str, Any]]:
    """(key, value) of every scalar in a defaults or vars file (a list item: its index)."""
    out: list[tuple[str, Any]] = []
    items: Any = []
    if isinstance(data, dict):
        items = data.items()
    elif isinstance(data, list):
        items = enumerate(data)
    for key, value in items:
        if isinstance(value, (dict, list)):
            out += _scalars(value)
        else:
            out.append((str(key), value))
    return out


def defaulted_restatements(role: str, owners: dict[str, set[str]]) -> list[str]:
    found = []
    for _part, path in _files(role):
        text = path.read_text()
        for match in DEFAULTED.finditer(text):
            name = match.group(1)
            others = owners.get(name, set()) - {role}
            if others and role not in owners.get(name, set()) and (role, name) not in ALLOWED:
                line = text[: match.start()].count("\n") + 1
                owner = "/".join(sorted(others))
                found.append(f"{path.relative_to(ROOT)}:{line}: {name} | default(...) restates "
                             f"role {owner}'s default")
    return found


def literal_restatements(role: str, values: dict[Any, set[tuple[str, str]]]) -> list[str]:
    found = []
    for part, path in _files(role):
        text = path.read_text()
        copies: list[tuple[str, Any]] = []
        for match in LITERAL.finditer(text):
            plain, quoted, number = match.groups()
            value = int(number) if number is not None else plain if plain is not None else quoted
            copies.append(("default(...)", value))
        if part in ("defaults", "vars"):
            copies += [(k, v) for k, v in _scalars(_yaml(path)) if _distinct(k, v)]
        for where, value in copies:
            # another role's default (a value two roles both default to: each copies the other)
            others = {(o, n) for o, n in values.get(value, set()) if o != role}
            if others:
                names = ", ".join(f"role {o}'s {n}" for o, n in sorted(others))
                found.append(f"{path.relative_to(ROOT)}: {where} = {value!r} copies {names}")
    return found


def test_no_role_defaults_another_roles_variable() -> None:
    owners = _declared()
    found = [hit for role in _roles() for hit in defaulted_restatements(role, owners)]
    assert not found, "\n".join(found)


def test_no_role_copies_another_roles_default_value() -> None:
    values = _owned_values()
    found = [hit for role in _roles() for hit in literal_restatements(role, values)]
    assert not found, "\n".join(found)


def test_the_allow_list_is_used() -> None:
    """Every allowed restatement still exists (an entry left over hides nothing)."""
    for role, name in ALLOWED:
        texts = [path.read_text() for _part, path in _files(role)]
        assert any(re.search(rf"\b{name}\s*\|\s*default\(", text) for text in texts), (role, name)
