"""The module instinct.vllm.staged_files on files under tmp_path, owned by the test's user."""

from __future__ import annotations

import grp
import json
import os
import pwd
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.instinct.vllm.plugins.modules import staged_files

OWNER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name


@pytest.fixture
def staged(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "staged").mkdir()
    (tmp_path / "live").mkdir()
    (tmp_path / "staged" / "vllm.service").write_text("[Service]\nExecStart=/new\n")
    (tmp_path / "staged" / "vllm.env").write_text("VLLM_API_KEY=new\n")
    (tmp_path / "live" / "vllm.service").write_text("[Service]\nExecStart=/old\n")
    return {"staged": tmp_path / "staged", "live": tmp_path / "live"}


def args(d: dict[str, Path], **extra: object) -> dict:
    return {"owner": OWNER, "group": GROUP, **extra, "files": [
        {"src": str(d["staged"] / "vllm.service"), "dest": str(d["live"] / "vllm.service"),
         "mode": "0644"},
        {"src": str(d["staged"] / "vllm.env"), "dest": str(d["live"] / "vllm.env"), "mode": "0600"},
    ]}


def run_module(module_args: dict, capsys: pytest.CaptureFixture[str]) -> dict:
    with patch_module_args(module_args), pytest.raises(SystemExit):
        staged_files.main()
    return json.loads(capsys.readouterr().out)


def test_puts_each_changed_file_in_place_with_its_mode(staged, capsys):
    result = run_module(args(staged), capsys)
    assert result["changed"] is True
    assert result["placed"] == [str(staged["live"] / n) for n in ("vllm.service", "vllm.env")]
    assert (staged["live"] / "vllm.service").read_text().endswith("/new\n")
    assert (staged["live"] / "vllm.env").stat().st_mode & 0o7777 == 0o600
    assert (staged["live"] / "vllm.service").stat().st_mode & 0o7777 == 0o644
    assert sorted(p.name for p in staged["live"].iterdir()) == ["vllm.env", "vllm.service"]
    again = run_module(args(staged), capsys)
    assert again == {"changed": False, "placed": [], "invocation": again["invocation"]}


def test_a_mode_alone_differing_is_a_change(staged, capsys):
    run_module(args(staged), capsys)
    (staged["live"] / "vllm.env").chmod(0o644)
    result = run_module(args(staged), capsys)
    assert result["placed"] == [str(staged["live"] / "vllm.env")]
    assert (staged["live"] / "vllm.env").stat().st_mode & 0o7777 == 0o600


def test_a_link_at_the_destination_is_replaced_not_followed(staged, tmp_path, capsys):
    target = tmp_path / "elsewhere"
    target.write_text("keep me\n")
    (staged["live"] / "vllm.env").symlink_to(target)
    run_module(args(staged), capsys)
    assert target.read_text() == "keep me\n"
    assert not (staged["live"] / "vllm.env").is_symlink()
    assert (staged["live"] / "vllm.env").read_text() == "VLLM_API_KEY=new\n"


def test_check_mode_says_what_would_change_and_changes_nothing(staged, capsys):
    result = run_module(args(staged, _ansible_check_mode=True), capsys)
    assert result["changed"] is True and len(result["placed"]) == 2
    assert (staged["live"] / "vllm.service").read_text().endswith("/old\n")
    assert not (staged["live"] / "vllm.env").exists()


def test_nothing_staged_fails_naming_the_file_and_changes_nothing(staged, capsys):
    (staged["staged"] / "vllm.env").unlink()
    result = run_module(args(staged), capsys)
    assert result["failed"] is True
    assert str(staged["staged"] / "vllm.env") in result["msg"] and "stage" in result["msg"]
    assert (staged["live"] / "vllm.service").read_text().endswith("/old\n")


@pytest.mark.parametrize("mode", ["rw-r--r--", "17777"])
def test_a_bad_mode_fails_before_anything_changes(staged, capsys, mode):
    module_args = args(staged)
    module_args["files"][1]["mode"] = mode
    result = run_module(module_args, capsys)
    assert result["failed"] is True and f"mode {mode!r}" in result["msg"]
    assert (staged["live"] / "vllm.service").read_text().endswith("/old\n")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_file_may_name_its_own_owner_and_group(staged, capsys):
    nobody = pwd.getpwnam("nobody")
    module_args = args(staged)
    module_args["files"][1].update(owner="nobody", group=grp.getgrgid(nobody.pw_gid).gr_name)
    run_module(module_args, capsys)
    env, unit = (staged["live"] / "vllm.env").stat(), (staged["live"] / "vllm.service").stat()
    assert (env.st_uid, env.st_gid) == (nobody.pw_uid, nobody.pw_gid)
    assert unit.st_uid == os.getuid()
    again = run_module(module_args, capsys)
    assert again["changed"] is False


def test_an_unknown_owner_of_one_file_fails_before_any_change(staged, capsys):
    module_args = args(staged)
    module_args["files"][1]["owner"] = "no-such-user-here"
    result = run_module(module_args, capsys)
    assert result["failed"] and "no-such-user-here" in result["msg"]
    assert (staged["live"] / "vllm.service").read_text().endswith("/old\n")
