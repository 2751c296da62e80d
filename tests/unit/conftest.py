"""Make `ansible_collections.instinct.vllm` importable from the checkout for unit tests."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COLLECTIONS = ROOT / ".collections"
if not (COLLECTIONS / "ansible_collections" / "instinct" / "vllm").exists():
    raise RuntimeError(f"{COLLECTIONS} is missing: run `make collections` first")
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

FIXTURES = Path(__file__).resolve().parent / "fixtures"
