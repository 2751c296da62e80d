"""scripts/release (`make release`): what it prints as the upload (name, size, sha256,
dependencies, contents, the publish commands) and its refusal to release a version twice. The
whole run (changelog, signature, tarball, galaxy-importer) is docs/development.md's
"Releasing"; its importer step is the galaxy-importer stage of `make test`."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
import yaml
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[3]
release = load_script("release", ROOT / "scripts" / "release")


def fake_tarball(path: Path) -> Path:
    manifest = {"collection_info": {"namespace": "instinct", "name": "vllm", "version": "9.9.9",
                                    "dependencies": {"awx.awx": ">=24.6.1,<25.0.0"}}}
    members = {"MANIFEST.json": json.dumps(manifest), "FILES.json": "{}",
               "roles/vllm/README.md": "# vllm\n", "plugins/modules/a.py": "", "galaxy.yml": ""}
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_the_summary_names_what_would_be_uploaded(tmp_path):
    tarball = fake_tarball(tmp_path / "instinct-vllm-9.9.9.tar.gz")
    lines = release.summary(tarball).splitlines()
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    assert lines[0] == (f"{tarball}: instinct.vllm 9.9.9, {tarball.stat().st_size} bytes, "
                        f"sha256 {digest}")
    assert lines[1] == "  dependencies: awx.awx >=24.6.1,<25.0.0"
    assert lines[2] == "  5 files: . 3, plugins 1, roles 1"


def test_the_next_steps_say_how_to_publish_and_whether_it_is_signed(tmp_path):
    tarball = tmp_path / "instinct-vllm-9.9.9.tar.gz"
    unsigned = release.next_steps(tarball, "9.9.9", signed=False)
    assert "scripts/sign-project --fingerprint" in unsigned
    assert f"ansible-galaxy collection publish {tarball}" in unsigned
    assert "git tag -s 9.9.9" in unsigned
    assert "sign-project" not in release.next_steps(tarball, "9.9.9", signed=True)


def test_a_released_version_is_refused(tmp_path):
    (tmp_path / "changelogs").mkdir()
    changes = {"ancestor": None, "releases": {"0.1.0": {"changes": {}}}}
    (tmp_path / "changelogs" / "changelog.yaml").write_text(yaml.safe_dump(changes))
    with pytest.raises(release.ReleaseError, match=r"0\.1\.0 is already"):
        release.check_unreleased("0.1.0", tmp_path)
    release.check_unreleased("0.2.0", tmp_path)
