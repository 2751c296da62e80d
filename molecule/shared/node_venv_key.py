"""Print the key of a converged node's vLLM virtualenv: what built it, hashed.

The key covers the roles and plugins that install it, the stack matrix and locks, the
wheelhouses it was installed from (file names and sizes), the sandbox image, and the node's
install variables (JSON on stdin). Any change to one of them gives a new key, so a cached
virtualenv is never reused for a node the roles would now build differently.

    node_venv_key.py ROOT IMAGE_ID WHEELHOUSE... < vars.json
"""

from __future__ import annotations

import hashlib
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


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    print(key(Path(argv[1]), argv[2], argv[3:], sys.stdin.read()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
