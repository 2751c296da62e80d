"""ansible-navigator.yml, the settings file the collection ships for running its playbooks in
the execution environment (docs/awx.md, "From the command line: ansible-navigator"): valid for
the pinned ansible-navigator, naming the release's image, and part of the collection tarball.
The awx scenario runs a playbook with it from the checkout's root
(molecule/awx/tests/test_navigator.py), which checks that ansible-navigator found and applied it."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = ROOT / "ansible-navigator.yml"
DATA = yaml.safe_load(SETTINGS.read_text())


def test_the_settings_file_is_valid_for_the_pinned_navigator() -> None:
    schema = json.loads(
        files("ansible_navigator.data").joinpath("ansible-navigator.json").read_text()
    )
    jsonschema.validate(DATA, schema)


def test_it_runs_the_release_image_in_the_ee_without_a_text_interface() -> None:
    settings = DATA["ansible-navigator"]
    ee = settings["execution-environment"]
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    owner = galaxy["repository"].removeprefix("https://github.com/").split("/")[0]
    # the image awx/execution_environments.yml names (tests/unit/test_awx_config.py)
    assert ee["image"] == f"ghcr.io/{owner}/instinct-vllm-ee:{galaxy['version']}"
    assert (ee["enabled"], ee["container-engine"], settings["mode"]) == (True, "podman", "stdout")
    paths = ee["environment-variables"]["set"]["ANSIBLE_COLLECTIONS_PATH"].split(":")
    assert paths == [".collections", "/usr/share/ansible/collections"]


def test_the_collection_tarball_ships_it() -> None:
    ignored = set(yaml.safe_load((ROOT / "galaxy.yml").read_text())["build_ignore"])
    assert SETTINGS.name not in ignored
    # what a run writes next to it stays out of the tarball and of git
    assert ".navigator" in ignored
    assert "/.navigator/" in (ROOT / ".gitignore").read_text().splitlines()
