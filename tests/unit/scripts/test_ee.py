"""The execution environment: execution-environment.yml, what the collection declares for it
(meta/execution-environment.yml, requirements.txt, bindep.txt) and scripts/ee's offline build
(the derived definition, the key). The image itself is built and used by molecule/awx."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[3]


def _load_script():
    return load_script("ee", ROOT / "scripts/ee")


ee = _load_script()
DEFINITION = yaml.safe_load((ROOT / "execution-environment.yml").read_text())


def pins(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            out[name.lower()] = version
    return out


def test_ee_pins_are_the_tested_versions() -> None:
    dev = pins(ROOT / "requirements" / "dev.txt")
    deps = DEFINITION["dependencies"]
    for key in ("ansible_core", "ansible_runner"):
        name, version = deps[key]["package_pip"].split("==")
        assert dev[name] == version, key
    for name, version in pins(ROOT / "requirements.txt").items():
        assert dev[name] == version, f"requirements.txt {name}: dev.txt has {dev.get(name)}"
    for tool in ee.BUILDER_TOOLS:
        name, version = tool.split("==")
        assert dev[name.lower()] == version, tool


def test_the_collection_declares_its_controller_needs(tmp_path: Path) -> None:
    """ansible-builder's own introspection over this collection finds requirements.txt and
    bindep.txt through meta/execution-environment.yml."""
    (tmp_path / "ansible_collections" / "instinct").mkdir(parents=True)
    (tmp_path / "ansible_collections" / "instinct" / "vllm").symlink_to(ROOT)
    out = subprocess.run(["ansible-builder", "introspect", str(tmp_path)], check=True,
                         capture_output=True, text=True).stdout
    data = yaml.safe_load(out.split("\n", 1)[1])
    python = [line.split("#")[0].strip() for line in data["python"]]
    system = [line.split("#")[0].strip() for line in data["system"]]
    assert python == ["openai==3.57.0", "matplotlib==3.11.2"]
    assert "openssh-client [platform:dpkg]" in system


def test_the_collection_tarball_keeps_the_ee_files() -> None:
    ignored = set(yaml.safe_load((ROOT / "galaxy.yml").read_text())["build_ignore"])
    for rel in ("requirements.txt", "bindep.txt", "meta/execution-environment.yml"):
        top = rel.split("/", maxsplit=1)[0]
        assert (ROOT / rel).is_file() and rel not in ignored and top not in ignored


def test_offline_definition_adds_only_the_offline_settings() -> None:
    derived = ee.offline_definition(DEFINITION, "localhost/instinct-ee-base:abc", Path("/w"))
    assert derived["dependencies"]["galaxy"] == "requirements-offline.yml"
    assert derived["build_arg_defaults"]["ANSIBLE_GALAXY_CLI_COLLECTION_OPTS"] == "--offline"
    assert {"src": "/w", "dest": "offline/wheels"} in derived["additional_build_files"]
    assert "ENV PIP_CONFIG_FILE=/output/offline/pip.conf" in \
        derived["additional_build_steps"]["prepend_base"]
    back = copy.deepcopy(derived)
    back["images"]["base_image"]["name"] = DEFINITION["images"]["base_image"]["name"]
    back["dependencies"]["galaxy"] = DEFINITION["dependencies"]["galaxy"]
    for key in ("build_arg_defaults", "additional_build_files", "additional_build_steps"):
        back.pop(key)
    assert back == DEFINITION
    assert yaml.safe_load((ROOT / "execution-environment.yml").read_text()) == DEFINITION


@pytest.mark.parametrize("which", ["root", "offline"])
def test_ansible_builder_accepts_the_definition(tmp_path: Path, which: str) -> None:
    path = ROOT / "execution-environment.yml"
    if which == "offline":
        (tmp_path / "wheels").mkdir()
        derived = ee.offline_definition(DEFINITION, "localhost/instinct-ee-base:abc",
                                        tmp_path / "wheels")
        (tmp_path / "offline").mkdir()
        (tmp_path / "offline" / "pip.conf").write_text(ee.PIP_CONF)
        (tmp_path / "collections").mkdir()
        (tmp_path / "requirements-offline.yml").write_text("collections: []\n")
        path = tmp_path / "execution-environment.yml"
        path.write_text(yaml.safe_dump(derived))
    done = subprocess.run(["ansible-builder", "create", "--file", str(path), "--context",
                           str(tmp_path / "context")], check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    containerfile = (tmp_path / "context" / "Containerfile").read_text()
    assert 'ARG PKGMGR="/usr/local/bin/instinct-ee-pkgmgr"' in containerfile
    assert "/output/scripts/pip_install" not in containerfile  # skip_pip_install
    assert "check_ansible" in containerfile
    if which == "offline":
        assert 'ARG ANSIBLE_GALAXY_CLI_COLLECTION_OPTS="--offline"' in containerfile
        assert "COPY _build/offline /output/offline" in containerfile


def test_key_follows_every_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for rel in ee.KEY_FILES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    monkeypatch.setattr(ee, "ROOT", tmp_path)
    key = ee.image_key("sha256:base", ["a-1.whl", "b-2.whl"], "3.2.0")
    assert key == ee.image_key("sha256:base", ["b-2.whl", "a-1.whl"], "3.2.0")
    assert key != ee.image_key("sha256:other", ["a-1.whl", "b-2.whl"], "3.2.0")
    assert key != ee.image_key("sha256:base", ["a-1.whl", "b-3.whl"], "3.2.0")
    assert key != ee.image_key("sha256:base", ["a-1.whl", "b-2.whl"], "3.3.0")
    for rel in ee.KEY_FILES:
        with (tmp_path / rel).open("a") as f:
            f.write("\n# changed\n")
        changed = ee.image_key("sha256:base", ["a-1.whl", "b-2.whl"], "3.2.0")
        assert changed != key, f"{rel} is not in the key"
        key = changed


def test_pip_requirements_cover_what_the_build_installs() -> None:
    reqs = ee.pip_requirements(DEFINITION, ["openai==3.57.0"])
    assert "ansible-core==2.19.14" in reqs and "ansible-runner==2.4.3" in reqs
    assert "dumb-init==1.2.5" in reqs and "bindep==2.14.0" in reqs and "openai==3.57.0" in reqs


def test_galaxy_yml_from_an_installed_manifest() -> None:
    manifest = {"collection_info": {"namespace": "a", "name": "b", "version": "1.0.0",
                                    "license": ["GPL-3.0-or-later"], "license_file": None,
                                    "tags": [], "readme": "README.md", "authors": ["x"]}}
    assert ee.galaxy_yml(manifest) == {"namespace": "a", "name": "b", "version": "1.0.0",
                                       "license": ["GPL-3.0-or-later"], "readme": "README.md",
                                       "authors": ["x"]}
    manifest["collection_info"].update(license=[], license_file="COPYING")
    assert ee.galaxy_yml(manifest)["license_file"] == "COPYING"


def test_third_party_are_the_galaxy_pins() -> None:
    reqs = yaml.safe_load((ROOT / "collections" / "requirements.yml").read_text())
    assert ee.third_party(reqs) == [("ansible.posix", "2.1.0"), ("community.crypto", "3.0.5"),
                                    ("awx.awx", "24.6.1"), ("community.grafana", "2.3.0")]
