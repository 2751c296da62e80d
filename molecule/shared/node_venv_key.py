"""Print the key of a converged node's vLLM virtualenv: what built it, hashed.

The key covers the roles and plugins that install it, the stack matrix and locks, the
wheelhouses it was installed from (file names and sizes), the sandbox image, and the node's
install variables (JSON on stdin). Any change to one of them gives a new key, so a cached
virtualenv is never reused for a node the roles would now build differently.

    node_venv_key.py ROOT IMAGE_ID WHEELHOUSE... < vars.json

Before a run, scripts/test asks whether a scenario that restores the virtualenv (fleet) can
start at once, without waiting for the scenario that saves it (serving). The node's key needs
the inventory as Ansible evaluates it, so the restore records, next to the saved virtualenv,
which key the scenario's *inputs* led to: the same sources, the image, every wheelhouse on
the scenario's Molecule files name and those files. Same inputs, same key; any change: wait.

    node_venv_key.py --inputs ROOT IMAGE_ID SCENARIO CACHE   print the inputs key
    node_venv_key.py --ready ROOT IMAGE_ID SCENARIO CACHE    exit 0 if its virtualenv is saved
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

SOURCES = ("roles/vllm", "roles/stack", "plugins/filter", "plugins/module_utils", "files")


def files_under(root: Path) -> list[Path]:
    found: list[Path] = []
    for name in SOURCES:
        base = root / name
        found.extend(p for p in base.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return sorted(found)


def key(root: Path, image: str, wheelhouses: list[str], variables: str) -> str:
    digest = hashlib.sha256()
    for path in files_under(root):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    for house in wheelhouses:
        for wheel in sorted(Path(house).glob("*")):
            digest.update(f"{wheel.name} {wheel.stat().st_size}\n".encode())
    digest.update(image.encode() + b"\0" + variables.encode())
    return digest.hexdigest()[:16]


def inputs_key(root: Path, image: str, scenario: str, cache: Path) -> str:
    """The key of what a scenario's node virtualenv is made from, readable before Molecule runs:
    the scenario's Molecule files (and its job inventory, if any) and the wheelhouses they name."""
    files = [root / ".config/molecule/config.yml", root / "molecule" / scenario / "molecule.yml",
             root / "molecule" / scenario / "inventory" / "hosts.yml"]
    text = "\0".join(p.read_text() for p in files if p.is_file())
    named = sorted(set(re.findall(r"/var/cache/instinct-vllm/wheels/([\w.+-]+)", text)))
    houses = [Path("/opt/wheels"), *(cache / "wheels" / name for name in named)]
    return key(root, image, [str(h) for h in houses], text)


def record_path(root: Path, image: str, scenario: str, cache: Path) -> Path:
    return cache / "node-venvs" / f"inputs-{scenario}-{inputs_key(root, image, scenario, cache)}"


def ready(root: Path, image: str, scenario: str, cache: Path) -> bool:
    """Did these inputs lead to a key whose virtualenv is saved?"""
    record = record_path(root, image, scenario, cache)
    if not record.is_file():
        return False
    return (cache / "node-venvs" / f"{record.read_text().strip()}.tar").is_file()


def main(argv: list[str]) -> int:
    if len(argv) == 6 and argv[1] in ("--inputs", "--ready"):
        root, image, scenario, cache = Path(argv[2]), argv[3], argv[4], Path(argv[5])
        if argv[1] == "--inputs":
            print(inputs_key(root, image, scenario, cache))
            return 0
        return 0 if ready(root, image, scenario, cache) else 1
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    print(key(Path(argv[1]), argv[2], argv[3:], sys.stdin.read()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
