"""scripts/pythons-requirements: the dev lock for one interpreter, less the pins with a local
version (served only by pip's find-links directories) that no wheel there serves to it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[3]
pr = load_script("instinct_pythons_requirements", ROOT / "scripts" / "pythons-requirements")

CP311 = "cp311-cp311-manylinux_2_28_x86_64"
CP312 = "cp312-cp312-manylinux_2_28_x86_64"
LOCK = "aiofiles==25.1.0\n# a comment\ntorch==2.13.0+cpu\nyarl==1.0  # trailing\n"


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    directory = tmp_path / "wheels"
    directory.mkdir()
    (directory / f"torch-2.13.0+cpu-{CP311}.whl").touch()
    (directory / "not-a-wheel.whl").touch()
    return directory


def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        wheels: Path, tags: set[str], *flags: str) -> str:
    lock = tmp_path / "dev.txt"
    lock.write_text(LOCK)
    monkeypatch.setattr(pr, "interpreter_tags", lambda python: tags)
    monkeypatch.setenv("PIP_FIND_LINKS", f"file://{wheels} https://example.org/links")
    assert pr.main([*flags, "python3.x", str(lock)]) == 0
    return capsys.readouterr().out


def test_a_local_pin_without_a_wheel_for_the_python_is_left_out(monkeypatch, capsys, tmp_path,
                                                                wheels) -> None:
    out = run(monkeypatch, capsys, tmp_path, wheels, {CP312, "py3-none-any"})
    assert "torch" not in out
    assert "aiofiles==25.1.0" in out and "yarl==1.0" in out
    assert run(monkeypatch, capsys, tmp_path, wheels, {CP312}, "--left-out").split() == [
        "torch==2.13.0+cpu"]


def test_a_local_pin_with_a_wheel_for_the_python_is_kept(monkeypatch, capsys, tmp_path,
                                                         wheels) -> None:
    out = run(monkeypatch, capsys, tmp_path, wheels, {CP311})
    assert "torch==2.13.0+cpu" in out
    assert run(monkeypatch, capsys, tmp_path, wheels, {CP311}, "--left-out").strip() == "none"


def test_the_interpreters_own_tags() -> None:
    """pip's own packaging, run by the interpreter: its CPython ABI tag is among them."""
    abi = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    assert any(tag.startswith(f"{abi}-{abi}-") for tag in pr.interpreter_tags(sys.executable))
