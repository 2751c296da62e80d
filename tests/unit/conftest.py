"""Make `ansible_collections.instinct.vllm` importable from the checkout for unit tests."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COLLECTIONS = ROOT / ".collections"
if not (COLLECTIONS / "ansible_collections" / "instinct" / "vllm").exists():
    raise RuntimeError(f"{COLLECTIONS} is missing: run `make collections` first")
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

# torch._dynamo registers polyfills for builtins such as sys.intern when first imported; once
# ansible-core's module_utils have patched sys.intern (any test importing AnsibleModule does),
# that import fails ("substitute_in_graph expects a function"). Import it first, once, so the
# order in which pytest collects the test files does not matter.
with contextlib.suppress(ImportError):  # the unit tests that need torch skip without it
    import torch._dynamo  # noqa: F401  # pylint: disable=unused-import

FIXTURES = Path(__file__).resolve().parent / "fixtures"
