"""Every role's meta/argument_specs.yml matches its defaults/main.yml, and its README names
every option (the README is kept in step with the spec)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROLES = sorted(p for p in (Path(__file__).resolve().parents[2] / "roles").iterdir() if p.is_dir())


def _spec_options(role: Path) -> dict:
    """The options of every entry point (main, and e.g. vllm's tasks_from: contract)."""
    spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())
    options: dict = {}
    for entry in spec["argument_specs"].values():
        options.update(entry.get("options", {}))
    return options


def _defaults(role: Path) -> dict:
    path = role / "defaults" / "main.yml"
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_default_is_in_the_argument_spec(role: Path) -> None:
    missing = sorted(set(_defaults(role)) - set(_spec_options(role)))
    assert not missing, f"{role.name}: defaults without an argument_specs entry: {missing}"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_optional_spec_option_has_a_default(role: Path) -> None:
    defaults = _defaults(role)
    lacking = sorted(
        name
        for name, opt in _spec_options(role).items()
        if not opt.get("required") and name not in defaults and "default" not in opt
        and name.startswith(role.name + "_")
    )
    assert not lacking, f"{role.name}: optional options with no default anywhere: {lacking}"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_readme_names_every_option(role: Path) -> None:
    readme = (role / "README.md").read_text()
    absent = sorted(name for name in _spec_options(role) if name not in readme)
    assert not absent, f"{role.name}/README.md does not mention: {absent}"
