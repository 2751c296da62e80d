"""scripts/sign-project and MANIFEST.in: the project content ansible-sign signs is every file
of the checkout, and a checkout verifies the way AWX verifies it at a project sync (the public
key alone in a fresh GnuPG home, `ansible-sign project gpg-verify`) until a file is changed,
added or removed, or the checksum list is edited. A throwaway key in a temporary GNUPGHOME."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[3]
sign_project = load_script("sign_project", ROOT / "scripts" / "sign-project")

pytestmark = pytest.mark.skipif(
    shutil.which("gpg") is None or shutil.which("ansible-sign") is None,
    reason="needs gpg and ansible-sign",
)


def gpg(home: Path, *args: str, stdin: str | None = None) -> str:
    return subprocess.run(
        ["gpg", "--batch", "--homedir", str(home), *args],
        input=stdin, capture_output=True, text=True, check=True,
    ).stdout


def new_key(home: Path, name: str) -> str:
    """A passphrase-less Ed25519 signing key in a new GnuPG home; its fingerprint."""
    home.mkdir(mode=0o700)
    gpg(home, "--passphrase", "", "--quick-gen-key", f"{name} <{name}@example.invalid>",
        "ed25519", "sign", "never")
    rows = gpg(home, "--with-colons", "--list-secret-keys").splitlines()
    return next(r.split(":")[9] for r in rows if r.startswith("fpr:"))


def public_home(home: Path, signer: Path, fingerprint: str) -> Path:
    """A fresh GnuPG home holding only the signer's public key (AWX imports the GPG Public
    Key credential into one at each sync)."""
    home.mkdir(mode=0o700)
    gpg(home, "--import", stdin=gpg(signer, "--armor", "--export", fingerprint))
    return home


def stop_agent(home: Path) -> None:
    """gpg starts an agent per home (signing, and importing a key); stop it."""
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False,
                   capture_output=True)


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Path]]:
    """(a signed checkout with a .git directory, the verifying GnuPG home, the signer's)."""
    tmp = tmp_path_factory.mktemp("sign")
    signer = tmp / "signer"
    fingerprint = new_key(signer, "release")
    project = tmp / "project"
    sign_project.export(project)
    (project / ".git").mkdir()
    (project / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPG_TTY", "")  # no terminal: ansible-sign asks gpg-agent, no passphrase
        sign_project.sign(project, fingerprint, str(signer))
    verifier = public_home(tmp / "verifier", signer, fingerprint)
    yield project, verifier, signer
    stop_agent(signer)
    stop_agent(verifier)


def verify(project: Path, home: Path) -> subprocess.CompletedProcess[str]:
    return sign_project.ansible_sign("gpg-verify", "--gnupg-home", str(home), str(project))


def tampered(signed: tuple[Path, Path, Path], tmp_path: Path) -> Path:
    copy = tmp_path / "project"
    shutil.copytree(signed[0], copy)
    return copy


def test_the_signed_checkout_verifies(signed):
    run = verify(signed[0], signed[1])
    assert run.returncode == 0, run.stdout
    assert "GPG signature verification succeeded" in run.stdout
    assert "Checksum validation succeeded" in run.stdout


def test_every_file_of_the_checkout_is_signed_and_git_is_not(signed):
    listed = {
        line.split(maxsplit=1)[1]
        for line in (signed[0] / ".ansible-sign" / "sha256sum.txt").read_text().splitlines()
    }
    assert listed == set(sign_project.checkout_files())
    assert "MANIFEST.in" in listed and "galaxy.yml" in listed and ".gitignore" in listed


@pytest.mark.parametrize("change", ["edit", "add", "remove"])
def test_a_changed_checkout_fails(signed, tmp_path, change):
    project = tampered(signed, tmp_path)
    target = project / "playbooks" / "site.yml"
    if change == "edit":
        target.write_text(target.read_text() + "# one more line\n")
    elif change == "add":
        (project / "playbooks" / "extra.yml").write_text("---\n[]\n")
        target = project / "playbooks" / "extra.yml"
    else:
        target.unlink()
    run = verify(project, signed[1])
    assert run.returncode != 0
    assert "Checksum validation failed" in run.stdout
    assert "playbooks/" + target.name in run.stdout


def test_an_edited_checksum_list_fails_the_signature(signed, tmp_path):
    project = tampered(signed, tmp_path)
    listing = project / ".ansible-sign" / "sha256sum.txt"
    listing.write_text("\n".join(listing.read_text().splitlines()[1:]) + "\n")
    run = verify(project, signed[1])
    assert run.returncode != 0
    assert "GPG signature verification succeeded" not in run.stdout


def test_another_key_does_not_verify(signed, tmp_path):
    other = tmp_path / "other"
    fingerprint = new_key(other, "other")
    try:
        run = verify(signed[0], public_home(tmp_path / "verifier", other, fingerprint))
    finally:
        stop_agent(other)
        stop_agent(tmp_path / "verifier")
    assert run.returncode != 0
    assert "GPG signature verification succeeded" not in run.stdout
