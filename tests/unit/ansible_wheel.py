"""Read collections straight from the pinned PyPI `ansible` wheel (the one scripts/collections
unpacks), without unpacking it: versions from MANIFEST.json, module sources by path."""

from __future__ import annotations

import json
import os
import re
import zipfile
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def wheel_version() -> str:
    """ANSIBLE_WHEEL_VERSION of scripts/collections: the one pin of the ansible package."""
    text = (ROOT / "scripts" / "collections").read_text()
    match = re.search(r'^ANSIBLE_WHEEL_VERSION = "([^"]+)"$', text, re.MULTILINE)
    if match is None:
        raise AssertionError("scripts/collections: no ANSIBLE_WHEEL_VERSION")
    return match.group(1)


def wheel_path() -> Path:
    cache_dir = Path(os.environ.get("INSTINCT_CACHE", "/var/cache/instinct-vllm")) / "wheels"
    found = sorted(cache_dir.glob(f"ansible-{wheel_version()}-*.whl"))
    if not found:
        raise AssertionError(
            f"no ansible-{wheel_version()} wheel in {cache_dir}: "
            "run scripts/collections (it downloads it)"
        )
    return found[0]


@cache
def _names() -> frozenset[str]:
    with zipfile.ZipFile(wheel_path()) as whl:
        return frozenset(whl.namelist())


def collections() -> frozenset[str]:
    """Every collection the wheel ships, as namespace.name."""
    found = set()
    for name in _names():
        parts = name.split("/")
        if len(parts) == 4 and parts[0] == "ansible_collections" and parts[3] == "MANIFEST.json":
            found.add(f"{parts[1]}.{parts[2]}")
    return frozenset(found)


@cache
def read(member: str) -> str:
    with zipfile.ZipFile(wheel_path()) as whl:
        return whl.read(member).decode()


def collection_version(fqcn: str) -> str:
    namespace, name = fqcn.split(".")
    manifest = json.loads(read(f"ansible_collections/{namespace}/{name}/MANIFEST.json"))
    return str(manifest["collection_info"]["version"])


def module_source(fqcn: str, module: str) -> str:
    namespace, name = fqcn.split(".")
    return read(f"ansible_collections/{namespace}/{name}/plugins/modules/{module}.py")
