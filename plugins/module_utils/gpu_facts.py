"""GPU facts of a host (public facade of the private package `_gpu_facts`).

Modules and tests import from here; the collectors (one per tool) and the parsers live in
`_gpu_facts/` (collect.py, pci.py, rocm.py, driver.py) and may change shape freely.
"""

from __future__ import annotations

from ansible_collections.instinct.vllm.plugins.module_utils._gpu_facts.collect import (
    SOURCES,
    TOOLS,
    collect,
)

__all__ = ["SOURCES", "TOOLS", "collect"]
