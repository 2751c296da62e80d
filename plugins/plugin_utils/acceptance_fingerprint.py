# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Acceptance's check `fingerprint` from role fingerprint_gate's result (docs/acceptance.md).

Role acceptance includes role fingerprint_gate (the fingerprint of playbooks/fingerprint.yml and
of the rollout's gate) with `instinct_vllm_fingerprint_fail: false`, and turns the fact it
publishes, `fingerprint_gate_result`, into one check of the node's report: `ok` when every
verdict passed, `failed` when one failed or the transformers reference was refused (the model
does not fit the node's RAM: the node was not judged as asked), `error` when no fingerprint
could be taken, `skipped` when there was nothing to judge against or no service to judge.
The reason always says what was judged and what was not. Standard library only; used by the
filters instinct.vllm.acceptance_fingerprint and instinct.vllm.acceptance_fingerprint_skip.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.instinct.vllm.plugins.module_utils.acceptance import STATUSES, CheckResult

NAME = "fingerprint"
OK, FAILED, SKIPPED, ERROR = STATUSES
BASELINE_ONLY = "instinct_vllm_fingerprint_references: [baseline]"


def _true(value: Any) -> bool:
    """A flag as set_fact may leave it: a bool, or its text."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1")
    return bool(value)


def skip_reason(serve: Any) -> str:
    """'' when the fingerprint can judge the node's service, else why not, read from the serve
    check of the same run (None or no name: serve did not run, e.g. --tags fingerprint)."""
    if not isinstance(serve, Mapping) or not serve.get("name"):
        return ""
    detail = serve.get("detail") or {}
    reason = str(serve.get("reason", ""))
    if detail.get("mode") != "service":
        return ("no vLLM service on the node to fingerprint: the serve check used a temporary "
                f"server ({reason}); the fingerprint judges the running service - accept the "
                "node again once role vllm_service serves its model")
    if serve.get("status") != OK:
        return f"not judged: the service failed the serve check ({serve.get('status')}: {reason})"
    return ""


def _verdict_detail(verdict: Mapping[str, Any]) -> dict[str, Any]:
    failing = [{"id": p.get("id"), "problems": p.get("problems", [])}
               for p in verdict.get("prompts", []) if not p.get("ok", True)]
    out = {k: verdict.get(k) for k in ("ok", "max_abs", "mean_abs", "agreement",
                                       "greedy_mismatches", "tolerance")}
    out["failed_prompts"] = failing
    return out


def _not_judged(result: Mapping[str, Any]) -> list[str]:
    """What the references asked for could not judge, in words."""
    refs = list(result.get("references") or [])
    key = result.get("baseline_key", "")
    notes = []
    if "transformers" not in refs:
        notes.append("no transformers reference (not in instinct_vllm_fingerprint_references)")
    if "baseline" not in refs:
        notes.append("no fleet baseline (not in instinct_vllm_fingerprint_references)")
    elif not _true(result.get("baseline_found")):
        recorded = _true(result.get("baseline_recorded"))
        notes.append(f"no fleet baseline for key {key} yet" + (
            ": this node's fingerprint is now that baseline" if recorded else ""))
    consensus = result.get("consensus") or {}
    if "consensus" in refs and consensus.get("status") == "skipped":
        notes.append(f"consensus {consensus.get('summary', 'skipped')}")
    return notes


def _detail(result: Mapping[str, Any]) -> dict[str, Any]:
    verdicts = result.get("verdicts") or {}
    return {
        "references": list(result.get("references") or []),
        "judged": sorted(verdicts),
        "not_judged": _not_judged(result),
        "dtype": result.get("dtype", ""),
        "model_path": result.get("model_path", ""),
        "baseline_key": result.get("baseline_key", ""),
        "baseline_found": _true(result.get("baseline_found")),
        "baseline_recorded": _true(result.get("baseline_recorded")),
        "reference_seconds": result.get("reference_seconds", 0),
        "verdicts": {name: _verdict_detail(v) for name, v in verdicts.items()},
    }


def _judged(result: Mapping[str, Any], detail: dict[str, Any]) -> tuple[str, str]:
    """(status, reason) of a fingerprint that was taken."""
    verdicts = result.get("verdicts") or {}
    notes = detail["not_judged"]
    if not verdicts:
        return SKIPPED, "not judged: nothing to compare with (" + "; ".join(notes) + ")"
    status = OK if all(_true(v.get("ok")) for v in verdicts.values()) else FAILED
    reason = "; ".join(f"{name}: {v.get('summary', '')}" for name, v in verdicts.items())
    return status, reason + (" (" + "; ".join(notes) + ")" if notes else "")


def fingerprint_check(result: Any, skip: str = "", seconds: float = 0.0) -> dict[str, Any]:
    """The check `fingerprint` of the report, from fingerprint_gate_result (None: not run)."""
    if skip:
        return CheckResult(NAME, SKIPPED, skip).as_dict()
    if not isinstance(result, Mapping):
        return CheckResult(NAME, ERROR, "role fingerprint_gate published no result").as_dict()
    detail = _detail(result)
    error = str(result.get("error") or "")
    if error and _true(result.get("refused")):
        status, reason = FAILED, (
            f"not judged against transformers: {error}. To judge this node against the fleet "
            f"baseline alone, set {BASELINE_ONLY}")
    elif error:
        status, reason = ERROR, f"no fingerprint taken: {error}"
    else:
        status, reason = _judged(result, detail)
    return CheckResult(NAME, status, reason, detail, float(seconds or 0)).as_dict()
