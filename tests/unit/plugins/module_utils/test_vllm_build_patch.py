"""module_utils/_vllm_build/patch.py with GNU patch: check, apply, detect an applied series."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import pytest
from ansible_collections.instinct.vllm.plugins.module_utils._vllm_build import patch as vp

ROOT = Path(__file__).resolve().parents[4]
SERIES = ROOT / "files" / "patches" / "vllm" / "0.6.6.post1"
SDIST = Path("/var/cache/instinct-vllm/sdist/vllm-0.6.6.post1.tar.gz")

pytestmark = pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch not installed")


def make_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("one\ntwo\nthree\n")
    (tree / "b.txt").write_text("alpha\nbeta\n")
    return tree


P1 = """--- a/a.txt
+++ b/a.txt
@@ -1,3 +1,3 @@
 one
-two
+TWO
 three
"""
P2 = """--- a/b.txt
+++ b/b.txt
@@ -1,2 +1,2 @@
 alpha
-beta
+BETA
"""
P_BAD = """--- a/a.txt
+++ b/a.txt
@@ -1,3 +1,3 @@
 uno
-dos
+DOS
 tres
"""


def patches(tmp_path: Path, *bodies: str) -> list[str]:
    out = []
    for i, body in enumerate(bodies, 1):
        p = tmp_path / f"{i:04d}-p.patch"
        p.write_text(body)
        out.append(str(p))
    return out


def test_series_applies_then_rerun_detects_it(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    series = patches(tmp_path, P1, P2)
    first = vp.apply_series(str(tree), series)
    assert [r["status"] for r in first.results] == ["applied", "applied"] and first.changed
    assert (tree / "a.txt").read_text() == "one\nTWO\nthree\n"
    again = vp.apply_series(str(tree), series)
    assert [r["status"] for r in again.results] == ["already_applied"] * 2
    assert not again.changed
    assert (tree / "a.txt").read_text() == "one\nTWO\nthree\n"  # not reverted, not doubled
    assert not list(tree.glob("*.orig")) and not list(tree.glob("*.rej"))


def test_half_applied_series_applies_the_rest(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    p1, p2 = patches(tmp_path, P1, P2)
    vp.apply_series(str(tree), [p1])
    out = vp.apply_series(str(tree), [p1, p2])
    assert [r["status"] for r in out.results] == ["already_applied", "applied"]


def test_patch_that_does_not_apply_fails_naming_it_and_stops(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    series = patches(tmp_path, P_BAD, P2)
    with pytest.raises(vp.PatchError) as err:
        vp.apply_series(str(tree), series)
    assert err.value.name == "0001-p.patch" and "0001-p.patch" in str(err.value)
    assert (tree / "b.txt").read_text() == "alpha\nbeta\n"  # the next patch was not touched
    assert (tree / "a.txt").read_text() == "one\ntwo\nthree\n"


def test_check_mode_changes_nothing(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    out = vp.apply_series(str(tree), patches(tmp_path, P1, P2), check_mode=True)
    assert [r["status"] for r in out.results] == ["would_apply", "pending"] and out.changed
    assert (tree / "a.txt").read_text() == "one\ntwo\nthree\n"


def test_read_series_order_and_missing(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / "b.patch").write_text(P2)
    (d / "a.patch").write_text(P1)
    assert [p.name for p in vp.read_series(d)] == ["a.patch", "b.patch"]
    (d / "series").write_text("# order\nb.patch\na.patch  # second\n")
    assert [p.name for p in vp.read_series(d)] == ["b.patch", "a.patch"]
    (d / "series").write_text("c.patch\n")
    with pytest.raises(FileNotFoundError, match=r"c\.patch"):
        vp.read_series(d)


def test_shipped_series_is_documented() -> None:
    names = [p.name for p in vp.read_series(SERIES)]
    assert names, "the default stack ships at least one patch"
    readme = (SERIES / "README.md").read_text()
    for name in names:
        assert name in readme, f"{name} is not documented in README.md"
        text = (SERIES / name).read_text()
        assert "torch.hip" not in text and '"hip"' not in text


@pytest.mark.skipif(
    not SDIST.is_file(), reason=f"{SDIST} not downloaded (the molecule run fetches it)"
)
def test_shipped_series_applies_to_the_real_sdist_and_is_detected(tmp_path: Path) -> None:
    with tarfile.open(SDIST) as tar:
        tar.extractall(tmp_path, filter="data")
    tree = tmp_path / "vllm-0.6.6.post1"
    series = [str(p) for p in vp.read_series(SERIES)]
    assert all(r["status"] == "applied" for r in vp.apply_series(str(tree), series).results)
    assert "cmake>=3.26,<4" in (tree / "requirements-build.txt").read_text().splitlines()
    assert all(r["status"] == "already_applied" for r in vp.apply_series(str(tree), series).results)
