"""collections/requirements.yml (what an AWX project sync installs), galaxy.yml's dependencies
and the FQCNs the collection's content uses name the same collections, but for the optional
ones (used only where OPTIONAL says, left out of galaxy.yml's dependencies, named by the
README); each pin is the version the pinned ansible wheel ships, and this collection's own entry
is its git repository."""

from __future__ import annotations

import re
from pathlib import Path

import ansible_wheel
import pytest
import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
REQUIREMENTS = yaml.safe_load((ROOT / "collections" / "requirements.yml").read_text())[
    "collections"
]
SELF = f"{GALAXY['namespace']}.{GALAXY['name']}"
# What runs on a controller or a node; molecule/, tests/ and inventories/demo are test-only.
CONTENT = ("roles", "playbooks", "plugins")
TEST_ONLY = ("molecule", "tests", "inventories/demo")
FQCN = re.compile(r"(?<![\w.])([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\.[a-z][a-z0-9_]*\b")
# Optional requirements: the playbook the README names for each, and the only places that use it.
OPTIONAL = {
    "awx.awx": ("playbooks/awx_configure.yml", ("roles/awx/",)),
    "community.grafana": ("playbooks/monitoring.yml", ("roles/monitoring/",)),
}


def collections_by_file(folders: tuple[str, ...]) -> dict[str, set[str]]:
    """Collections of the wheel (or this one) each file under the folders names by FQCN, outside
    whole-line comments (which may name a collection the site brings, e.g. grafana.grafana)."""
    known = ansible_wheel.collections() | {SELF}
    found: dict[str, set[str]] = {}
    for folder in folders:
        for path in (ROOT / folder).rglob("*"):
            if path.suffix not in {".yml", ".yaml", ".j2", ".py"} or not path.is_file():
                continue
            lines = path.read_text(errors="replace").splitlines()
            text = "\n".join(line for line in lines if not line.lstrip().startswith(("#", "{#")))
            names = {f"{m.group(1)}.{m.group(2)}" for m in FQCN.finditer(text)}
            if names := (names & known) - {SELF, "ansible.builtin"}:
                found[str(path.relative_to(ROOT))] = names
    return found


def used_collections(folders: tuple[str, ...]) -> set[str]:
    return {name for names in collections_by_file(folders).values() for name in names}


def pins() -> dict[str, str]:
    return {e["name"]: str(e["version"]) for e in REQUIREMENTS if e.get("type") != "git"}


def test_this_collection_comes_from_its_repository_at_the_release() -> None:
    own = [e for e in REQUIREMENTS if e.get("type") == "git"]
    assert own == [
        {"name": f"git+{GALAXY['repository']}.git", "type": "git", "version": GALAXY["version"]}
    ]


def test_the_content_uses_exactly_the_required_collections() -> None:
    used = used_collections(CONTENT)
    assert used == set(pins()), (
        f"FQCNs in {CONTENT} name {sorted(used)}; requirements.yml pins {sorted(pins())}"
    )
    assert set(GALAXY["dependencies"]) == used - set(OPTIONAL), (
        f"galaxy.yml dependencies: {sorted(GALAXY['dependencies'])}"
    )


@pytest.mark.parametrize("name", sorted(OPTIONAL))
def test_an_optional_collection_is_used_only_where_the_readme_says(name: str) -> None:
    playbook, places = OPTIONAL[name]
    users = sorted(f for f, names in collections_by_file(CONTENT).items() if name in names)
    assert users, f"{name}: nothing uses it any more"
    assert [f for f in users if not f.startswith(places)] == [], (
        f"{name} is an optional requirement: a file outside {places} uses it"
    )
    readme = (ROOT / "README.md").read_text()
    assert re.search(rf"\*\*{re.escape(name)}\*\* by\s+`{re.escape(playbook)}`", readme), (
        f"README: {name}, the optional requirement of {playbook}"
    )


def test_test_only_collections_are_not_dependencies() -> None:
    test_only = used_collections(TEST_ONLY) - used_collections(CONTENT)
    assert test_only, "the scan finds the test-only collections (containers.podman)"
    assert not test_only & set(GALAXY["dependencies"])


@pytest.mark.parametrize("name", sorted(pins()))
def test_the_pin_is_the_wheel_version_and_the_galaxy_range_starts_there(name: str) -> None:
    pin = pins()[name]
    assert pin == ansible_wheel.collection_version(name), (
        f"{name} {pin} in collections/requirements.yml; ansible "
        f"{ansible_wheel.wheel_version()} ships {ansible_wheel.collection_version(name)}"
    )
    if name in OPTIONAL:
        return  # no galaxy.yml range: an optional requirement
    spec = SpecifierSet(GALAXY["dependencies"][name])
    assert Version(pin) in spec, f"galaxy.yml {name}: {spec} excludes the pin {pin}"
    assert f">={pin}" in {str(s) for s in spec}, (
        f"galaxy.yml {name}: {spec} does not start at the pin {pin}"
    )


@pytest.mark.parametrize("key", ["repository", "documentation", "issues"])
def test_galaxy_urls_are_one_real_address(key: str) -> None:
    url = GALAXY[key]
    assert url.startswith("https://") and ".invalid" not in url and "example" not in url, (
        f"galaxy.yml {key}: {url}"
    )
    assert url == GALAXY["repository"] or url.startswith(GALAXY["repository"] + "/"), (
        f"galaxy.yml {key}: {url}"
    )


@pytest.mark.parametrize("name", sorted(pins()))
def test_the_pinned_collection_runs_on_our_minimum_core(name: str) -> None:
    namespace, collection = name.split(".")
    ours = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())["requires_ansible"]
    match = re.fullmatch(r">=\s*([\d.]+)", ours)
    assert match, f"meta/runtime.yml requires_ansible: {ours!r}"
    minimum = Version(match.group(1))
    theirs = yaml.safe_load(
        ansible_wheel.read(f"ansible_collections/{namespace}/{collection}/meta/runtime.yml")
    )["requires_ansible"]
    assert minimum in SpecifierSet(theirs), f"{name} {pins()[name]} requires ansible-core {theirs}"
