"""The result of one acceptance check, and the report of a node."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

OK = "ok"
FAILED = "failed"
SKIPPED = "skipped"
ERROR = "error"  # the check itself could not run (probe crashed, tool missing)
STATUSES = (OK, FAILED, SKIPPED, ERROR)
MASK = "********"


@dataclass
class CheckResult:
    name: str
    status: str
    reason: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["seconds"] = round(self.seconds, 2)
        return out


def overall(results: list[dict[str, Any]]) -> str:
    """failed if any check failed or errored, ok if at least one passed, else skipped."""
    statuses = {r.get("status") for r in results}
    if statuses & {FAILED, ERROR}:
        return FAILED
    if OK in statuses:
        return OK
    return SKIPPED


def redact(value: Any, secrets: list[str]) -> Any:
    """`value` with every occurrence of each non-empty secret replaced by a mask."""
    secrets = [s for s in secrets if s]
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, MASK)
        return value
    if isinstance(value, dict):
        return {redact(k, secrets): redact(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v, secrets) for v in value]
    return value


def build_report(
    results: list[dict[str, Any] | None],
    node: str,
    stack: str,
    device: str,
    started: str,
    finished: str,
    secrets: list[str] | None = None,
) -> dict[str, Any]:
    """The node's JSON report: one entry per check that ran (tags may select a subset)."""
    ran = [
        {k: r[k] for k in ("name", "status", "reason", "detail", "seconds") if k in r}
        for r in results
        if isinstance(r, dict) and r.get("name")
    ]
    report = {
        "node": node,
        "stack": stack,
        "device": device,
        "started": started,
        "finished": finished,
        "status": overall(ran),
        "summary": ", ".join(f"{r['name']}={r['status']}" for r in ran),
        "failures": [f"{r['name']}: {r['reason']}" for r in ran if r["status"] in (FAILED, ERROR)],
        "checks": {r["name"]: r for r in ran},
    }
    return redact(report, secrets or [])
