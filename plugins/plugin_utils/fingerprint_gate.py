# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Role fingerprint_gate's controller side (docs/fingerprint.md): the consensus verdict from the
peers' answers, and the node's last fingerprint record that role diagnose reads.

`consensus_verdict` turns the results of the module fingerprint run on each peer with
`consensus_of` (a loop's results, each naming its peer) into one verdict: `failed` when a peer
that was judged disagrees, `ok` when every judged peer agrees, `skipped` - with the reason - when
no peer was judged (none named, consensus turned off, every peer claiming other answers or not
answering). Never `ok` without a judged peer. Standard library only; used by the filters
instinct.vllm.fingerprint_consensus and instinct.vllm.fingerprint_record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

VERDICT_FIELDS = ("max_abs", "mean_abs", "agreement", "greedy_mismatches", "tolerance", "prompts")
SUMMARY_FIELDS = ("ok", "summary", "max_abs", "mean_abs", "agreement", "greedy_mismatches",
                  "left_out")


def _peer(item: Mapping[str, Any], loop_var: str) -> tuple[str, dict[str, Any]]:
    """(peer, {status, reason, claims, verdict}) of one loop result."""
    name = str(item.get(loop_var) or item.get("item") or "?")
    if item.get("unreachable"):
        return name, {"status": "skipped", "reason": f"unreachable: {item.get('msg', '')}",
                      "claims": {}, "verdict": None}
    found = item.get("consensus")
    if not isinstance(found, Mapping):
        return name, {"status": "skipped", "claims": {}, "verdict": None,
                      "reason": f"could not score the probe: {item.get('msg', 'no result')}"}
    return name, {"status": str(found.get("status")), "reason": str(found.get("reason", "")),
                  "claims": dict(found.get("claims") or {}), "verdict": found.get("verdict")}


def _skipped(reason: str, peers: dict[str, Any]) -> dict[str, Any]:
    return {"status": "skipped", "ok": True, "skipped": True, "reason": reason,
            "summary": f"skipped: {reason}", "peers": peers}


def consensus_verdict(results: Sequence[Mapping[str, Any]] | None, skip: str = "",
                      loop_var: str = "_fingerprint_gate_peer") -> dict[str, Any]:
    """One consensus verdict from the peers' results (`skip`: why none was asked)."""
    if skip:
        return _skipped(skip, {})
    # a skipped item was not asked (past the number of peers wanted, or no probe to score)
    peers = dict(_peer(item, loop_var) for item in results or [] if not item.get("skipped"))
    judged = {n: p for n, p in peers.items() if p["status"] in ("ok", "failed")}
    if not judged:
        why = "; ".join(f"{n}: {p['reason']}" for n, p in peers.items()) or "no peer asked"
        return _skipped(f"no node not changed yet claims the same answers ({why})", peers)
    failed = [n for n, p in judged.items() if p["status"] == "failed"]
    worst = failed[0] if failed else max(judged, key=lambda n: judged[n]["verdict"]["max_abs"])
    verdict = judged[worst]["verdict"]
    notes = [f"{n} skipped: {p['reason']}" for n, p in peers.items() if n not in judged]
    head = (f"disagrees with {', '.join(failed)}" if failed
            else f"agrees with {', '.join(judged)}")
    out = {"status": "failed" if failed else "ok", "ok": not failed, "skipped": False,
           "peer": worst, "reason": "", "peers": peers,
           "summary": f"{head} (against {worst}: {verdict['summary']})"
           + ("; " + "; ".join(notes) if notes else "")}
    out.update({k: verdict.get(k) for k in VERDICT_FIELDS})
    return out


def node_record(result: Mapping[str, Any], node: str, fingerprint: Mapping[str, Any] | None,
                baseline: Mapping[str, Any] | None, time: str = "") -> dict[str, Any]:
    """The node's last fingerprint, as kept on the controller: the verdicts' summaries (no
    per-prompt data), the node's meta (revision, stack, flags, claims) and the baseline's."""
    verdicts = result.get("verdicts") or {}
    consensus = result.get("consensus") or {}
    return {
        "node": node, "time": time, "ok": bool(result.get("ok")),
        "error": str(result.get("error") or ""), "msg": str(result.get("msg") or ""),
        "references": list(result.get("references") or []),
        "baseline_key": result.get("baseline_key", ""),
        "baseline_found": bool(result.get("baseline_found")),
        # seconds the transformers reference took here; 0: read from the node's cache (a
        # rollout takes it while the node still serves)
        "reference_seconds": float(result.get("reference_seconds") or 0),
        "meta": dict((fingerprint or {}).get("meta") or {}),
        "baseline_meta": dict((baseline or {}).get("meta") or {}),
        "verdicts": {name: {k: v.get(k) for k in SUMMARY_FIELDS} for name, v in verdicts.items()},
        "consensus": {k: consensus.get(k) for k in ("status", "summary", "peer")} | {
            "peers": {n: {k: p.get(k) for k in ("status", "reason", "claims")}
                      for n, p in (consensus.get("peers") or {}).items()}} if consensus else {},
    }
