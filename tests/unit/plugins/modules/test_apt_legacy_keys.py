"""The module instinct.vllm.apt_legacy_keys on a fake /etc/apt (tmp_path)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.instinct.vllm.plugins.module_utils import openpgp_keyring as kr
from ansible_collections.instinct.vllm.plugins.modules import apt_legacy_keys

KEYS = Path(__file__).resolve().parents[2] / "fixtures" / "openpgp"
VENDOR = "FFA78303CE1B6E097D7938DDCC167BEAC152E6D7"
OTHER = "F51C04A3BD15222EA13226680D254BCB3BAD3355"


@pytest.fixture
def etc_apt(tmp_path: Path) -> Path:
    (tmp_path / "trusted.gpg.d").mkdir()
    shutil.copy(KEYS / "apt-key-trusted.gpg", tmp_path / "trusted.gpg")  # apt-key add: both
    shutil.copy(KEYS / "vendor.gpg", tmp_path / "trusted.gpg.d" / "radeon-manual.gpg")
    shutil.copy(KEYS / "vendor.asc", tmp_path / "trusted.gpg.d" / "vendor-copy.asc")
    shutil.copy(KEYS / "other.gpg", tmp_path / "trusted.gpg.d" / "other.gpg")
    shutil.copy(KEYS / "other.gpg", tmp_path / "trusted.gpg.d" / "rocm.gpg")  # legacy name
    (tmp_path / "trusted.gpg.d" / "notes.txt").write_text("not a keyring")
    (tmp_path / "trusted.gpg.d" / "broken.gpg").write_bytes(b"garbage")
    return tmp_path


def run_module(args: dict, capsys: pytest.CaptureFixture[str]) -> dict:
    with patch_module_args(args), pytest.raises(SystemExit):
        apt_legacy_keys.main()
    return json.loads(capsys.readouterr().out)


def test_removes_the_vendor_key_everywhere_and_keeps_the_rest(etc_apt, capsys):
    args = {
        "key": (KEYS / "vendor.asc").read_text(),
        "paths": [str(etc_apt / "trusted.gpg"), str(etc_apt / "trusted.gpg.d")],
        "names": ["rocm.gpg"],
    }
    result = run_module(args, capsys)
    assert result["changed"] is True
    assert result["fingerprints"] == [VENDOR]
    d = etc_apt / "trusted.gpg.d"
    assert sorted(result["removed"]) == sorted(
        str(p) for p in (d / "radeon-manual.gpg", d / "vendor-copy.asc", d / "rocm.gpg")
    )
    assert result["rewritten"] == [str(etc_apt / "trusted.gpg")]
    assert result["unreadable"] == [str(d / "broken.gpg")]
    assert kr.key_fingerprints((etc_apt / "trusted.gpg").read_bytes()) == [OTHER]
    assert sorted(p.name for p in d.iterdir()) == ["broken.gpg", "notes.txt", "other.gpg"]
    # a second run changes nothing
    again = run_module(args, capsys)
    assert again["changed"] is False


def test_check_mode_changes_nothing(etc_apt, capsys):
    before = {p: p.read_bytes() for p in etc_apt.rglob("*") if p.is_file()}
    result = run_module(
        {
            "key": (KEYS / "vendor.asc").read_text(),
            "paths": [str(etc_apt / "trusted.gpg"), str(etc_apt / "trusted.gpg.d")],
            "_ansible_check_mode": True,
        },
        capsys,
    )
    assert result["changed"] is True
    assert {p: p.read_bytes() for p in etc_apt.rglob("*") if p.is_file()} == before


def test_a_key_that_is_not_a_key_fails(etc_apt, capsys):
    result = run_module({"key": "hello", "paths": [str(etc_apt)]}, capsys)
    assert result["failed"] is True
    assert result["msg"].startswith("key: not an OpenPGP public key")
