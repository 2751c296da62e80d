"""The watchdog wrapper's settings and vLLM's argv, read from a vllm.service ExecStart= line.

Role vllm_service renders `ExecStart=<python> <wrapper> <wrapper options> -- <vLLM argv>`. The
wrapper's settings are its own defaults (the Config dataclass of
roles/vllm_service/files/instinct-vllm-watchdog) with the options the line gives; used by the
saturation tests of the vllm-source and fleet scenarios and the serving scenario's load test.
"""

from __future__ import annotations

import dataclasses
import importlib.machinery
import importlib.util
import itertools
import shlex
import sys
from pathlib import Path

WRAPPER = Path(__file__).resolve().parents[2] / "roles" / "vllm_service" / "files" / \
    "instinct-vllm-watchdog"


def wrapper_defaults() -> dict[str, float]:
    """The wrapper's own numeric defaults by option name (probe-timeout, poll-interval, ...)."""
    loader = importlib.machinery.SourceFileLoader("instinct_vllm_watchdog", str(WRAPPER))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = module  # dataclasses looks its module up
    loader.exec_module(module)
    return {f.name.replace("_", "-"): f.default for f in dataclasses.fields(module.Config)
            if isinstance(f.default, float)}


def split(line: str) -> tuple[dict[str, float], list[str]]:
    """(the wrapper's settings, vLLM's argv) of one ExecStart= line."""
    words = shlex.split(line.split("=", 1)[1])
    cut = words.index("--")
    options = wrapper_defaults()
    for word, value in itertools.pairwise(words[:cut]):
        if word.startswith("--") and word[2:] in options:
            options[word[2:]] = float(value)
    return options, words[cut + 1:]


def exec_start(unit: str) -> str:
    """The last ExecStart= line of a unit file or drop-in that sets one."""
    return [x for x in unit.splitlines() if x.startswith("ExecStart=") and x != "ExecStart="][-1]


def flag(vllm: list[str], name: str, default: int) -> int:
    """An integer flag of vLLM's argv (default when absent)."""
    return int(vllm[vllm.index(name) + 1]) if name in vllm else default


def probe_window(options: dict[str, float]) -> float:
    """Seconds from a probe's start to the wrapper's verdict on it: one probe interval (the
    probe may start that late) + the probe timeout. Past it, a slow probe the watchdog did not
    excuse has stopped the pings and turned the agent check down."""
    return options["probe-interval"] + options["probe-timeout"]


def deep_queue(options: dict[str, float]) -> float:
    """The queue a saturation test builds: a 1-token request waits longer than this, 1.2 x the
    probe timeout, so the watchdog's probe times out and must be excused."""
    return 1.2 * options["probe-timeout"]
