"""The kernel log during the acceptance run, scanned with ROCm/cvs' failure patterns.

ERRORS is ``err_patterns_dict`` of ROCm/cvs ``cvs/lib/verify_lib.py`` (branch release/cvs-0.2.0),
matched case-insensitively line by line as CVS does. CVS excludes amdgpu's runlist
oversubscription messages from the failures ("info-level messages (not errors)"); ROCm/cvs PR
#179 proposes reporting them as a warning, as this check does: WARNINGS.
"""

from __future__ import annotations

import re
from typing import Any

from .probe import Runner, tail
from .result import ERROR, FAILED, OK, SKIPPED, CheckResult

ERRORS: dict[str, str] = {
    "gpu_reset": "GPU reset begin|GPU hang|cp might be in an unrecoverable state"
    "|fence wait loop timeout expired",
    "crash": "crashed|Traceback|cut here|Bug:|Call Trace|RIP:|end trace|amdgpu: Fatal error"
    "|segfault|show_stack|dump_stack|fault ",
    "test_fail": "Test failure",
    "fault": "no-retry page fault|Illegal register access|PROTECTION_FAULT_STATUS",
    "driver": "Queue preemption failed for queue|Failed to evict process queues"
    "|No more SDMA queue to allocate|amdgpu: process pid",
    "hardware": "hardware error|hardware fail|ras error|uncorrectable|correctable err",
    "network": "NIC Link is Down|link is down|ib_uverb|CQE|queue catastrophic|CQ error",
}
WARNINGS: dict[str, str] = {
    "oversubscription": "Runlist is getting oversubscribed|Expect reduced ROCm performance",
}
# CVS drops the SELinux/AppArmor audit lines before matching (egrep -v 'ALLOWED|DENIED')
_SKIP = re.compile("ALLOWED|DENIED")
MAX_LINES = 20


def scan(text: str) -> dict[str, list[dict[str, str]]]:
    """Matching lines: {"errors": [{category, line}], "warnings": [...]}, in log order; a line
    counts once, under the first category that matches it."""
    found: dict[str, list[dict[str, str]]] = {"errors": [], "warnings": []}
    for line in text.splitlines():
        if not line.strip() or _SKIP.search(line):
            continue
        for kind, patterns in (("warnings", WARNINGS), ("errors", ERRORS)):
            category = next((c for c, p in patterns.items() if re.search(p, line, re.I)), None)
            if category:
                found[kind].append({"category": category, "line": line.strip()})
                break
    return found


def judge_kernel_log(text: str, since: str) -> CheckResult:
    """Failed when any line of the window matches an error pattern."""
    found = scan(text)
    detail: dict[str, Any] = {
        "since": since,
        "lines": len(text.splitlines()),
        "errors": found["errors"][:MAX_LINES],
        "warnings": found["warnings"][:MAX_LINES],
    }
    errors, warnings = found["errors"], found["warnings"]
    if errors:
        categories = sorted({e["category"] for e in errors})
        reason = (
            f"{len(errors)} kernel log line(s) matching ROCm/cvs' failure patterns "
            f"({', '.join(categories)}) since {since}, first: {errors[0]['line']}"
        )
        return CheckResult("kernel_log", FAILED, reason, detail)
    reason = f"no failure pattern in {detail['lines']} kernel log line(s) since {since}"
    if warnings:
        reason += f"; {len(warnings)} warning(s): {warnings[0]['line']}"
    return CheckResult("kernel_log", OK, reason, detail)


def kernel_log(run: Runner, since: str, skip_reason: str = "") -> CheckResult:
    """The kernel's messages since ``since`` (seconds since the epoch, the node's clock at the
    start of the run) from the journal, judged; skipped with ``skip_reason`` on a stack without
    GPU."""
    if skip_reason:
        return CheckResult("kernel_log", SKIPPED, skip_reason)
    argv = ["journalctl", "-k", "--no-pager", "-q", "-o", "short-iso", "--since", f"@{since}"]
    rc, out, err = run(argv, "", {})
    if rc != 0:
        return CheckResult(
            "kernel_log", ERROR, f"{' '.join(argv)} exited {rc}: {tail(err or out, 3)}"
        )
    return judge_kernel_log(out, since)
