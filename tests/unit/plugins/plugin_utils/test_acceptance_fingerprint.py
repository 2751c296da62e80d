"""Acceptance's check fingerprint (plugin_utils/acceptance_fingerprint.py and its two filters):
role fingerprint_gate's published result turned into the report's check - verdicts from the
fingerprint's own comparison (module_utils/fingerprint.compare), a refused reference, an error,
nothing to compare with - and the skip decided from the serve check of the same run."""

from __future__ import annotations

from typing import Any

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.instinct.vllm.plugins.filter.acceptance import (
    acceptance_fingerprint,
    acceptance_fingerprint_skip,
)
from ansible_collections.instinct.vllm.plugins.module_utils import fingerprint as F
from ansible_collections.instinct.vllm.plugins.module_utils.acceptance import build_report
from ansible_collections.instinct.vllm.plugins.plugin_utils import acceptance_fingerprint as A

TOL = F.tolerance_for("float32")
SERVE_OK = {"name": "serve", "status": "ok", "reason": "8 tokens from demo in 0.4s",
            "detail": {"mode": "service", "service": "active"}}


def _fp(shift: float = 0.0) -> F.Fingerprint:
    scored = [F.Scored(id=f"p{i}", kind="completion", prompt_ids=[1, 4, 5], ref_ids=[6, 7],
                       start=2, greedy_text="ab", logprobs=[-1.0 + shift, -2.0, -0.5],
                       top_ids=[5, 6, 7], margins=[0.5, 0.5, 0.5]) for i in range(4)]
    return F.Fingerprint("test", "m", "sha", 2, 1, scored)


def _verdict(shift: float) -> dict[str, Any]:
    """The fingerprint's own verdict of an endpoint whose first log-probability moved."""
    return F.compare(_fp(), _fp(shift), TOL).as_dict()


def _result(**over: Any) -> dict[str, Any]:
    """fingerprint_gate_result of a node that passed both references."""
    base = {"ok": True, "error": "", "refused": False, "msg": "", "dtype": "float32",
            "verdicts": {"transformers": _verdict(0.0), "baseline": _verdict(0.0)},
            "references": ["transformers", "baseline"], "model_path": "/srv/models/demo",
            "reference_seconds": 0, "baseline_key": "0123abcd89ef4567",
            "baseline_found": True, "baseline_recorded": False}
    return {**base, **over}


def test_both_references_passed_is_ok_with_their_summaries() -> None:
    check = acceptance_fingerprint(_result(), seconds=3.2)
    assert check["name"] == "fingerprint" and check["status"] == "ok"
    assert check["reason"].startswith("transformers: 4/4 prompts within tolerance")
    assert "; baseline: 4/4 prompts within tolerance" in check["reason"]
    assert "no fleet baseline" not in check["reason"]  # no note on what was not judged
    assert "instinct_vllm_fingerprint_references" not in check["reason"]
    assert check["detail"]["judged"] == ["baseline", "transformers"]
    assert check["detail"]["not_judged"] == []
    assert check["seconds"] == 3.2


def test_a_scaled_answer_fails_naming_the_prompts_and_the_tolerance() -> None:
    bad = _verdict(0.5)
    check = acceptance_fingerprint(_result(ok=False, verdicts={"transformers": bad,
                                                               "baseline": _verdict(0.0)}))
    assert check["status"] == "failed"
    assert "FAILED" in check["reason"] and "max |delta logprob| 0.5 > 0.001" in check["reason"]
    got = check["detail"]["verdicts"]["transformers"]
    assert not got["ok"] and got["max_abs"] == pytest.approx(0.5)
    assert got["tolerance"]["max_abs"] == 0.001
    assert [p["id"] for p in got["failed_prompts"]] == ["p0", "p1", "p2", "p3"]
    assert check["detail"]["verdicts"]["baseline"]["failed_prompts"] == []


def test_the_verdicts_decide_not_the_published_ok() -> None:
    """A failed verdict fails the check even if ok were stale; flags as text are read."""
    check = acceptance_fingerprint(_result(ok="True", verdicts={"baseline": _verdict(0.5)}))
    assert check["status"] == "failed"
    check = acceptance_fingerprint(_result(baseline_found="False", baseline_recorded="True",
                                           verdicts={"transformers": _verdict(0.0)}))
    assert check["status"] == "ok"
    assert check["detail"]["baseline_found"] is False


def test_a_first_node_records_the_baseline_and_says_so() -> None:
    check = acceptance_fingerprint(_result(baseline_found=False, baseline_recorded=True,
                                           verdicts={"transformers": _verdict(0.0)}))
    assert check["status"] == "ok"
    assert check["reason"].endswith(
        "(no fleet baseline for key 0123abcd89ef4567 yet: this node's fingerprint is now that "
        "baseline)")
    assert check["detail"]["judged"] == ["transformers"]


def test_a_refused_reference_fails_and_names_the_baseline_only_setting() -> None:
    why = ("the transformers reference of /srv/models/big needs about 624.0 GiB of RAM "
           "(float32 on CPU) and this host has 500.0 GiB available: too large")
    check = acceptance_fingerprint(_result(ok=False, error=why, refused=True, verdicts={}))
    assert check["status"] == "failed"
    assert check["reason"].startswith("not judged against transformers: " + why)
    assert "instinct_vllm_fingerprint_references: [baseline]" in check["reason"]
    assert check["detail"]["judged"] == []


def test_no_fingerprint_taken_is_an_error_with_the_modules_words() -> None:
    check = acceptance_fingerprint(_result(ok=False, verdicts={}, error="HTTP 400 from "
                                           "/v1/completions: maximum context length is 512"))
    assert check["status"] == "error"
    assert check["reason"] == ("no fingerprint taken: HTTP 400 from /v1/completions: "
                               "maximum context length is 512")


def test_baseline_only_without_a_baseline_judged_nothing() -> None:
    check = acceptance_fingerprint(_result(references=["baseline"], verdicts={},
                                           baseline_found=False, baseline_recorded=True))
    assert check["status"] == "skipped"
    assert check["reason"] == (
        "not judged: nothing to compare with (no transformers reference (not in "
        "instinct_vllm_fingerprint_references); no fleet baseline for key 0123abcd89ef4567 "
        "yet: this node's fingerprint is now that baseline)")


def test_baseline_only_with_a_baseline_says_transformers_was_not_asked() -> None:
    check = acceptance_fingerprint(_result(references=["baseline"],
                                           verdicts={"baseline": _verdict(0.0)}))
    assert check["status"] == "ok"
    assert check["reason"].endswith(
        "(no transformers reference (not in instinct_vllm_fingerprint_references))")


def test_skip_wins_and_no_result_is_an_error() -> None:
    assert acceptance_fingerprint(_result(), skip="no service")["status"] == "skipped"
    assert acceptance_fingerprint(None, skip="no service")["reason"] == "no service"
    assert acceptance_fingerprint(None)["status"] == "error"
    with pytest.raises(AnsibleFilterError):
        acceptance_fingerprint(["not", "a", "dict"])


@pytest.mark.parametrize(("serve", "expected"), [
    (None, ""),
    ({}, ""),
    (SERVE_OK, ""),
    ({"name": "serve", "status": "ok", "reason": "8 tokens from demo in 20s",
      "detail": {"mode": "temporary", "why": "no unit"}},
     "the serve check used a temporary server"),
    ({"name": "serve", "status": "skipped", "detail": {"mode": "temporary"},
      "reason": "check mode: would start a temporary server"},
     "no vLLM service on the node to fingerprint"),
    ({"name": "serve", "status": "failed", "reason": "the unit vllm is failed (result exit-code)",
      "detail": {"mode": "service"}},
     "not judged: the service failed the serve check (failed: the unit vllm is failed"),
    ({"name": "serve", "status": "error", "reason": "systemctl: not found",
      "detail": {"mode": "service"}}, "not judged: the service failed the serve check (error"),
])
def test_the_fingerprint_judges_only_a_service_that_answered(serve, expected) -> None:
    reason = acceptance_fingerprint_skip(serve)
    assert (reason == "") if not expected else (expected in reason)


def test_in_the_report_a_failed_fingerprint_fails_the_node_by_name() -> None:
    bad = acceptance_fingerprint(_result(ok=False, verdicts={"transformers": _verdict(0.5)}))
    report = build_report([SERVE_OK, bad], "node1", "cpu", "cpu", "s", "f", ["k3y-s3cret"])
    assert report["status"] == "failed"
    assert report["summary"] == "serve=ok, fingerprint=failed"
    assert report["failures"][0].startswith("fingerprint: transformers: 0/4 prompts within")
    assert report["checks"]["fingerprint"]["detail"]["verdicts"]["transformers"]["ok"] is False


def test_the_statuses_are_the_reports_own() -> None:
    """Read from the acceptance facade's STATUSES by position: its order must not move."""
    assert (A.OK, A.FAILED, A.SKIPPED, A.ERROR) == ("ok", "failed", "skipped", "error")


def test_a_skipped_consensus_is_named_not_judged() -> None:
    """Outside a rollout no node is left to agree with: the check says so, judges the rest."""
    skipped = {"status": "skipped", "summary": "skipped: no node is left unchanged to agree "
               "with (outside a rollout, or its last batch)"}
    check = acceptance_fingerprint(_result(references=["transformers", "baseline", "consensus"],
                                           consensus=skipped))
    assert check["status"] == "ok" and check["detail"]["judged"] == ["baseline", "transformers"]
    assert check["detail"]["not_judged"] == [f"consensus {skipped['summary']}"]
    assert check["reason"].endswith("(consensus skipped: no node is left unchanged to agree with "
                                    "(outside a rollout, or its last batch))")
