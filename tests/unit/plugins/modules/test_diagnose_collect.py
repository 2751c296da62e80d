"""The module instinct.vllm.diagnose_collect writes only where no other user can redirect it.

The attack it must not fall for: a local user makes the evidence directory first (it is under
/var/tmp) and puts a link ``<host>.tar.gz`` -> a file of root's in it; root then overwrites the
link's target with the archive. The collectors are replaced by one quick stand-in: what is
tested is where and how the module writes.
"""

from __future__ import annotations

import json
import os
import stat
import tarfile
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.instinct.vllm.plugins.module_utils import diagnose as dg
from ansible_collections.instinct.vllm.plugins.modules import diagnose_collect

NOBODY = 65534
PRECIOUS = b"root's file, not to be touched\n"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


@pytest.fixture(autouse=True)
def quick_collectors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(diagnose_collect, "default_specs", lambda settings: [
        dg.Spec("unit_status", func=lambda: "ActiveState=active\n")])


def run(capsys: pytest.CaptureFixture[str], dest: Path, name: str = "node1") -> dict[str, Any]:
    params = {"dest": str(dest), "name": name, "env_file": str(dest.parent / "absent.env"),
              "venv": "/opt/vllm/venv", "unit": "vllm.service", "user": "vllm",
              "source_work_dir": str(dest.parent / "source")}
    with patch_module_args(params), pytest.raises(SystemExit):
        diagnose_collect.main()
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim"
    path.write_bytes(PRECIOUS)
    return path


@needs_root
def test_a_directory_made_by_another_user_is_refused(tmp_path: Path, victim: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "instinct-diagnose"
    dest.mkdir()
    os.chown(dest, NOBODY, NOBODY)
    (dest / "node1.tar.gz").symlink_to(victim)
    result = run(capsys, dest)
    assert victim.read_bytes() == PRECIOUS
    assert result["failed"]
    assert f"{dest} was made by someone else (uid {NOBODY}" in result["msg"]


@pytest.mark.parametrize("mode", [0o777, 0o770])
def test_a_directory_others_can_write_in_is_refused(tmp_path: Path, victim: Path, mode: int,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "instinct-diagnose"
    dest.mkdir()
    dest.chmod(mode)
    (dest / "node1.tar.gz").symlink_to(victim)
    result = run(capsys, dest)
    assert victim.read_bytes() == PRECIOUS
    assert result["failed"] and "another user could put links in it" in result["msg"]


def test_a_link_in_place_of_the_directory_is_refused(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / "instinct-diagnose").symlink_to(elsewhere)
    result = run(capsys, tmp_path / "instinct-diagnose")
    assert result["failed"] and "is not a directory (a link?)" in result["msg"]
    assert list(elsewhere.iterdir()) == []


def test_a_parent_others_can_rename_in_is_refused(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # world-writable, not sticky: anyone could swap dest for their own
    result = run(capsys, shared / "instinct-diagnose")
    assert result["failed"] and f"its parent {shared} is writable by others" in result["msg"]
    assert not (shared / "instinct-diagnose").exists()


def test_a_link_left_in_its_own_directory_is_replaced_not_followed(
        tmp_path: Path, victim: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "instinct-diagnose"
    dest.mkdir(mode=0o700)
    (dest / "node1.tar.gz").symlink_to(victim)
    result = run(capsys, dest)
    assert victim.read_bytes() == PRECIOUS
    assert not result.get("failed"), result
    assert not (dest / "node1.tar.gz").is_symlink()


def test_a_fresh_directory_gets_the_archive_and_nothing_else(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "instinct-diagnose"
    for _run in range(2):  # the second run replaces the first one's archive
        result = run(capsys, dest)
        assert not result.get("failed"), result
        assert result["archive"] == str(dest / "node1.tar.gz")
    assert stat.S_IMODE(dest.stat().st_mode) == 0o700
    assert stat.S_IMODE((dest / "node1.tar.gz").stat().st_mode) == 0o600
    assert [p.name for p in dest.iterdir()] == ["node1.tar.gz"]  # the evidence dir is gone
    with tarfile.open(dest / "node1.tar.gz") as tar:
        assert sorted(tar.getnames()) == ["node1", "node1/collectors.json", "node1/unit_status.txt"]


@pytest.mark.parametrize("name", ["../escape", ".."])
def test_a_name_that_is_not_a_file_name_is_refused(tmp_path: Path, name: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    result = run(capsys, tmp_path / "instinct-diagnose", name=name)
    assert result["failed"] and result["msg"].startswith("name:")


@pytest.mark.parametrize("missing", ["venv", "unit", "user", "env_file", "source_work_dir"])
def test_the_service_facts_are_arguments_not_defaults(capsys, tmp_path, missing) -> None:
    """Role diagnose passes role vllm_service's published facts; the module restates none."""
    params = {"dest": str(tmp_path / "out"), "name": "node1", "venv": "/v", "unit": "u.service",
              "user": "u", "env_file": "/e.env", "source_work_dir": "/s"}
    del params[missing]
    with patch_module_args(params), pytest.raises(SystemExit):
        diagnose_collect.main()
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] and out["msg"] == f"missing required arguments: {missing}", out
