"""One licence and one minimum ansible-core across galaxy.yml, meta/runtime.yml and the roles,
and the ansible-core the suite runs is within it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from ansible.release import __version__ as ansible_core_version

ROOT = Path(__file__).resolve().parents[2]
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
RUNTIME = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
ROLES = sorted(p for p in (ROOT / "roles").iterdir() if (p / "meta" / "main.yml").exists())


def _min_core() -> str:
    match = re.fullmatch(r">=\s*(\d+\.\d+)(\.0)?", RUNTIME["requires_ansible"])
    assert match, f"meta/runtime.yml requires_ansible: {RUNTIME['requires_ansible']!r}"
    return match.group(1)


def test_the_tested_core_meets_the_minimum() -> None:
    tested = tuple(int(x) for x in ansible_core_version.split(".")[:2])
    assert tested >= tuple(int(x) for x in _min_core().split("."))
    assert _min_core() == ".".join(map(str, tested)), (
        f"meta/runtime.yml says >= {_min_core()}, the suite runs ansible-core "
        f"{ansible_core_version}: an older minimum is not tested"
    )


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_role_metadata_agrees(role: Path) -> None:
    info = yaml.safe_load((role / "meta" / "main.yml").read_text())["galaxy_info"]
    assert [info["license"]] == GALAXY["license"], f"{role.name}: licence {info['license']}"
    assert str(info["min_ansible_version"]) == _min_core(), role.name
