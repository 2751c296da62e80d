"""Every filter has its documentation: plugins/filter/<filter name>.yml, read by ansible-doc.

Ansible finds a filter's documentation by the filter's name (a file holding several filters
cannot document them all), so each name FilterModule returns needs a YAML file of that name
with DOCUMENTATION (its name), EXAMPLES that use it, and RETURN; and no doc file is orphaned.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml

FILTER_DIR = Path(__file__).resolve().parents[4] / "plugins" / "filter"
PKG = "ansible_collections.instinct.vllm.plugins.filter"


def _filters() -> dict[str, str]:
    """filter name -> the .py file it is in."""
    names: dict[str, str] = {}
    for path in sorted(FILTER_DIR.glob("*.py")):
        module = importlib.import_module(f"{PKG}.{path.stem}")
        for name in module.FilterModule().filters():
            names[name] = path.name
    return names


FILTERS = _filters()


def test_there_are_filters() -> None:
    assert len(FILTERS) >= 10


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_filter_has_its_doc_file(name: str) -> None:
    path = FILTER_DIR / f"{name}.yml"
    assert path.exists(), f"filter {name} ({FILTERS[name]}) has no {path.name}"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert doc["DOCUMENTATION"]["name"] == name
    assert doc["DOCUMENTATION"]["short_description"]
    assert "_input" in doc["DOCUMENTATION"]["options"]
    assert f"instinct.vllm.{name}" in doc["EXAMPLES"]
    assert "_value" in doc["RETURN"]


def test_no_orphan_doc_file() -> None:
    orphans = sorted(p.name for p in FILTER_DIR.glob("*.yml") if p.stem not in FILTERS)
    assert not orphans, f"doc files for no filter: {orphans}"
