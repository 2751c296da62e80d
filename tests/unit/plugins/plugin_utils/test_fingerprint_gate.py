"""Role fingerprint_gate's controller side (plugin_utils/fingerprint_gate.py and the filters
fingerprint_consensus, fingerprint_record): the consensus verdict from the peers' loop results -
never ok without a judged peer - and the node's last fingerprint record."""

from __future__ import annotations

from typing import Any

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.instinct.vllm.plugins.filter.fingerprint import (
    fingerprint_consensus,
    fingerprint_record,
)
from ansible_collections.instinct.vllm.plugins.module_utils import fingerprint as F

TOL = F.tolerance_for("float32")


def _fp(shift: float = 0.0) -> F.Fingerprint:
    scored = [F.Scored(id=f"p{i}", kind="completion", prompt_ids=[1, 4, 5], ref_ids=[6, 7],
                       start=2, greedy_text="ab", logprobs=[-1.0 + shift, -2.0, -0.5],
                       top_ids=[5, 6, 7], margins=[0.5, 0.5, 0.5]) for i in range(4)]
    return F.Fingerprint("test", "m", "sha", 2, 1, scored)


def _peer(name: str, shift: float | None, reason: str = "") -> dict[str, Any]:
    """One loop result of the module run on `name` with consensus_of (shift None: skipped)."""
    if shift is None:
        found = {"status": "skipped", "reason": reason, "claims": {"model": "/m"}, "verdict": None}
    else:
        v = F.compare(_fp(), _fp(shift), TOL)
        found = {"status": "ok" if v.ok else "failed", "reason": v.summary,
                 "claims": {"model": "/m"}, "verdict": v.as_dict()}
    return {"_fingerprint_gate_peer": name, "consensus": found, "changed": False}


def test_every_judged_peer_agreeing_passes() -> None:
    v = fingerprint_consensus([_peer("n2", 0.0), _peer("n3", 0.0)])
    assert v["status"] == "ok" and v["ok"] and not v["skipped"]
    assert v["summary"].startswith("agrees with n2, n3 (against n2: 4/4 prompts within")
    assert v["max_abs"] == 0.0 and v["tolerance"]["max_abs"] == 0.001


def test_one_disagreeing_peer_fails_and_is_the_one_shown() -> None:
    v = fingerprint_consensus([_peer("n2", 0.0), _peer("n3", 0.5)])
    assert v["status"] == "failed" and not v["ok"] and v["peer"] == "n3"
    assert v["summary"].startswith("disagrees with n3 (against n3: 0/4 prompts within")
    assert v["max_abs"] == pytest.approx(0.5) and len(v["prompts"]) == 4


def test_no_judged_peer_is_skipped_with_each_reason_never_ok_silently() -> None:
    v = fingerprint_consensus([
        _peer("n2", None, "stack differs: torch 2.5.1 vs 2.6.0"),
        {"_fingerprint_gate_peer": "n3", "failed": False, "msg": "POST /v1/completions: refused"},
        {"_fingerprint_gate_peer": "n4", "unreachable": True, "msg": "ssh: timeout"},
        {"_fingerprint_gate_peer": "n5", "skipped": True, "changed": False}])  # not asked
    assert v["status"] == "skipped" and v["skipped"] and v["ok"]
    assert v["summary"] == (
        "skipped: no node not changed yet claims the same answers (n2: stack differs: torch "
        "2.5.1 vs 2.6.0; n3: could not score the probe: POST /v1/completions: refused; "
        "n4: unreachable: ssh: timeout)")
    assert "max_abs" not in v
    assert fingerprint_consensus([], skip="instinct_vllm_fingerprint_consensus is false")[
        "summary"] == "skipped: instinct_vllm_fingerprint_consensus is false"
    assert fingerprint_consensus(None)["status"] == "skipped"


def test_a_skipped_peer_beside_a_judged_one_is_named() -> None:
    v = fingerprint_consensus([_peer("n2", None, "served model name 'a' vs 'b'"),
                               _peer("n3", 0.0)])
    assert v["status"] == "ok" and v["summary"].endswith("; n2 skipped: served model name "
                                                         "'a' vs 'b'")


def test_the_node_record_keeps_summaries_and_both_metas() -> None:
    verdict = F.compare(_fp(), _fp(0.5), TOL).as_dict()
    consensus = fingerprint_consensus([_peer("n2", 0.5)])
    result = {"ok": False, "error": "", "msg": "m", "references": ["baseline", "consensus"],
              "baseline_key": "k", "baseline_found": True, "consensus": consensus,
              "verdicts": {"baseline": verdict, "consensus": consensus}, "reference_seconds": "2.5"}
    meta = {"revision": "/srv/models/r2", "stack": "cpu", "flags": {"dtype": "float32"}}
    record = fingerprint_record(result, node="n1", fingerprint={"meta": meta, "scored": []},
                                baseline={"meta": {**meta, "revision": "/srv/models/r1"}},
                                time="2026-12-03T08:00:00+00:00")
    assert record["node"] == "n1" and not record["ok"] and record["meta"] == meta
    assert record["baseline_meta"]["revision"] == "/srv/models/r1"
    assert record["reference_seconds"] == 2.5  # the result's string, a number in the record
    assert set(record["verdicts"]["baseline"]) == {"ok", "summary", "max_abs", "mean_abs",
                                                   "agreement", "greedy_mismatches", "left_out"}
    assert record["consensus"]["status"] == "failed" and record["consensus"]["peer"] == "n2"
    assert record["consensus"]["peers"]["n2"] == {"status": "failed", "claims": {"model": "/m"},
                                                  "reason": consensus["peers"]["n2"]["reason"]}
    with pytest.raises(AnsibleFilterError):
        fingerprint_record(None)
