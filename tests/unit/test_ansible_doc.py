"""ansible-doc renders every filter, module and role of the collection (what users read)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_DOC = Path(sys.executable).with_name("ansible-doc")


def _names(kind: str) -> list[str]:
    if kind == "module":
        return sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py"))
    if kind == "role":
        return sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "meta").is_dir())
    return sorted(p.stem for p in (ROOT / "plugins" / "filter").glob("*.yml"))


@pytest.mark.parametrize("kind", ["filter", "module", "role"])
def test_ansible_doc_renders_every_plugin(kind: str) -> None:
    names = _names(kind)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"), ANSIBLE_NOCOLOR="1")
    run = subprocess.run(
        [str(ANSIBLE_DOC), "--json", "-t", kind, *(f"instinct.vllm.{n}" for n in names)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    docs = json.loads(run.stdout)
    assert sorted(docs) == sorted(f"instinct.vllm.{n}" for n in names), run.stderr
    for name, doc in docs.items():
        if kind == "role":
            assert doc["entry_points"]["main"]["short_description"], name
        else:
            assert doc["doc"]["short_description"], name
