"""Run a probe: a Python program executed by the node's venv interpreter (where torch, vLLM and
the amdsmi binding live), which prints one JSON line after a marker."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

MARKER = "INSTINCT-ACCEPTANCE-RESULT "
# (argv, stdin, env) -> (rc, stdout, stderr); the module passes AnsibleModule.run_command
Runner = Callable[[list[str], str, dict[str, str]], tuple[int, str, str]]

PRELUDE = """
import json, sys, time
ARGS = json.loads(sys.argv[1])
def emit(obj):
    sys.stdout.write("\\n" + "INSTINCT-ACCEPTANCE-RESULT " + json.dumps(obj) + "\\n")
"""


class ProbeError(Exception):
    """The probe did not run to its result line (the message says why)."""


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def run_probe(
    run: Runner, python: str, source: str, args: dict[str, Any], env: dict[str, str]
) -> dict[str, Any]:
    """The probe's result object; ProbeError with the tail of its output otherwise."""
    rc, out, err = run([python, "-", json.dumps(args)], PRELUDE + source, env)
    for line in reversed(out.splitlines()):
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER) :])
    raise ProbeError(f"{python} exited {rc} without a result: {tail(err or out)}")
