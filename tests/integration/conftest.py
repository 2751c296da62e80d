"""Integration tests against real servers (slow; not part of `make test`, which runs tests/unit):
`.venv/bin/pytest tests/integration`. Same imports as the unit tests: the checkout's
`.collections` and the helpers in tests/unit (local_play)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for path in (ROOT / ".collections", ROOT / "tests" / "unit"):
    if not path.exists():
        raise RuntimeError(f"{path} is missing: run `make collections` first")
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
