"""Every role's meta/argument_specs.yml matches its defaults/main.yml, and its README names
every option (the README is kept in step with the spec)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from role_cases import role_params

ROLES = sorted(p for p in (Path(__file__).resolve().parents[3] / "roles").iterdir() if p.is_dir())


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


def _is_template(value: object) -> bool:
    return isinstance(value, str) and "{{" in value


#: Known disagreements, each an xfail that turns into a failure (strict) once it is mended.
_DEFAULTS_DIFFER: dict[str, str] = {}


@pytest.mark.parametrize("role", role_params(ROLES, _DEFAULTS_DIFFER), ids=lambda p: p.name)
def test_spec_defaults_equal_the_role_defaults(role: Path) -> None:
    """ansible-doc shows the spec's default; the role uses defaults/main.yml: they must agree.

    A default that is a template (it reads another role's variable) may be left out of the
    spec, whose description then says what it is; any other default must be in both, equal.
    """
    spec = _spec_options(role)
    differ = []
    for name, value in _defaults(role).items():
        opt = spec.get(name, {})
        if "default" not in opt:
            if not _is_template(value):
                differ.append(f"{name}: defaults/main.yml {value!r}, the spec has no default")
        elif opt["default"] != value or type(opt["default"]) is not type(value):
            differ.append(f"{name}: defaults/main.yml {value!r}, spec {opt['default']!r}")
    assert not differ, f"{role.name}: " + "; ".join(differ)
