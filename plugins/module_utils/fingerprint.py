"""Accuracy fingerprint of an OpenAI-compatible endpoint: public facade over _fingerprint/.

Fixed prompts (files/fingerprint/prompts.yml); for each, the endpoint's greedy continuation and
its teacher-forced log-probabilities of a reference continuation; compared with a reference -
transformers on CPU from the same checkpoint (`reference_scores`), or a recorded fingerprint
such as the fleet baseline - per prompt: token agreement, max and mean |delta logprob|, within
tolerances per dtype (`tolerance_for`). Consensus (`probe`, `judge`): during a rollout, a changed
node's own greedy continuations scored by a node not changed yet, when both claim the same
answers (`unit_claims`: served name, numerics flags, stack packages). The standard library and
ansible.module_utils.urls at import time; torch and transformers only when the transformers
reference is computed (docs/fingerprint.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from ._fileutil import json_text
from ._fingerprint.client import Endpoint, max_model_len, record, score
from ._fingerprint.compare import (
    DEFAULT_TOLERANCES,
    Tolerance,
    Verdict,
    compare,
    tolerance_for,
)
from ._fingerprint.consensus import (
    STACK_PACKAGES,
    Claims,
    PeerVerdict,
    ineligible,
    judge,
    probe,
    probe_claims,
    read_claims,
    unit_claims,
)
from ._fingerprint.record import (
    Fingerprint,
    Prompt,
    Scored,
    left_out_text,
    parse_prompts,
    prompts_sha256,
)
from ._fingerprint.reference import check_fits, checkpoint_id, compute
from ._tls_client import TLS_REQUIRED_TOGETHER, TLS_SPEC, TlsClient, TlsConfigError

__all__ = [
    "DEFAULT_TOLERANCES", "STACK_PACKAGES", "TLS_REQUIRED_TOGETHER", "TLS_SPEC", "Claims",
    "Endpoint", "Fingerprint", "PeerVerdict", "Prompt", "Refused", "Scored", "TlsClient",
    "TlsConfigError", "Tolerance", "Verdict", "baseline_key", "compare",
    "endpoint_fingerprint", "ineligible", "judge", "parse_prompts", "probe", "probe_claims",
    "read_claims", "reference_fingerprint", "references", "run", "tolerance_for", "unit_claims",
    "write_json",
]


class Refused(RuntimeError):
    """The transformers reference cannot be computed on this host (too large)."""


def baseline_key(revision: str, stack: str, flags: dict[str, Any]) -> str:
    """The fleet baseline's key: what a fingerprint is expected to be equal across (the model
    revision, the stack, the server flags that change numerics), as a short stable hash."""
    text = json.dumps({"revision": revision, "stack": stack, "flags": flags}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def reference_fingerprint(model_path: str, prompts: list[Prompt], max_tokens: int = 16,
                          window: int = 32, meta: dict[str, Any] | None = None) -> Fingerprint:
    """The transformers-on-CPU reference; raises Refused when the model does not fit in RAM."""
    why = check_fits(model_path)
    if why:
        raise Refused(why)
    started = time.monotonic()
    scored = compute(model_path, prompts, max_tokens, window)
    info = {"model_path": model_path, "seconds": round(time.monotonic() - started, 2),
            **(meta or {})}
    return Fingerprint("transformers", model_path, prompts_sha256(prompts), max_tokens, window,
                       scored, info)


def endpoint_fingerprint(ep: Endpoint, prompts: list[Prompt], like: Fingerprint | None = None,
                         max_tokens: int = 16, window: int = 32,
                         meta: dict[str, Any] | None = None,
                         limit: int | None = None) -> Fingerprint:
    """The endpoint's fingerprint on the tokens of `like` (a reference), or, without one, on its
    own tokenization and greedy continuation; prompts longer than `limit` (the server's
    max_model_len) left out and listed."""
    started = time.monotonic()
    if like is None:
        scored, out = record(ep, prompts, max_tokens, window, limit)
    else:
        if like.prompts_sha256 != prompts_sha256(prompts):
            raise ValueError("the reference was taken with another prompt set: record it again")
        like = like.within(limit)
        max_tokens, window, out = like.max_tokens, like.window, like.left_out
        scored = score(ep, prompts, like.scored, max_tokens) if like.scored else []
    if not scored:
        raise ValueError(f"no prompt fits the endpoint: {left_out_text(out)}")
    info = {"base_url": ep.base_url, "seconds": round(time.monotonic() - started, 2),
            **(meta or {})}
    return Fingerprint("endpoint", ep.model, prompts_sha256(prompts), max_tokens, window, scored,
                       info, out)


def write_json(path: str, data: dict[str, Any]) -> None:
    """Write JSON atomically (a temporary file in the same directory, then rename)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json_text(data), encoding="utf-8")
    os.replace(tmp, target)


def _cached(path: str, prompts: list[Prompt], model_path: str, max_tokens: int,
            window: int) -> Fingerprint | None:
    try:
        with open(path, encoding="utf-8") as f:
            fp = Fingerprint.from_dict(json.load(f))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    same = (fp.prompts_sha256, fp.max_tokens, fp.window, fp.meta.get("model_path"),
            fp.meta.get("checkpoint")) == (prompts_sha256(prompts), max_tokens, window, model_path,
                                           checkpoint_id(model_path))
    return fp if same else None


def references(prompts: list[Prompt], model_path: str | None, cache: str | None,
               baseline: dict[str, Any] | None, max_tokens: int = 16, window: int = 32,
               write: bool = True) -> tuple[dict[str, Fingerprint], float, bool]:
    """The references asked for: `transformers` (computed, or read from `cache` when it was taken
    the same way from the same checkpoint files) and `baseline`; the seconds the reference took
    and whether the cache was written."""
    refs: dict[str, Fingerprint] = {}
    seconds, written = 0.0, False
    if model_path:
        ref = _cached(cache, prompts, model_path, max_tokens, window) if cache else None
        if ref is None:
            ref = reference_fingerprint(model_path, prompts, max_tokens, window,
                                        {"checkpoint": checkpoint_id(model_path)})
            seconds = float(ref.meta["seconds"])
            if cache and write:
                write_json(cache, ref.as_dict())
                written = True
        refs["transformers"] = ref
    if baseline:
        refs["baseline"] = Fingerprint.from_dict(baseline)
    return refs, seconds, written


def _same_tokens(a: Fingerprint, b: Fingerprint) -> bool:
    return [(s.prompt_ids, s.ref_ids, s.start) for s in a.scored] == [
        (s.prompt_ids, s.ref_ids, s.start) for s in b.scored]


def run(ep: Endpoint, prompts: list[Prompt], references: dict[str, Fingerprint],
        tol: Tolerance, max_tokens: int = 16, window: int = 32,
        meta: dict[str, Any] | None = None) -> tuple[Fingerprint, dict[str, Verdict]]:
    """The endpoint's fingerprint and one verdict per named reference. The fingerprint is taken
    on the first reference's tokens; a reference with other tokens is scored on its own. Prompts
    longer than the server's max_model_len are left out on both sides, and listed."""
    limit = max_model_len(ep)
    refs = [(name, ref.within(limit)) for name, ref in references.items()]
    fp = endpoint_fingerprint(ep, prompts, refs[0][1] if refs else None, max_tokens, window, meta,
                              limit)
    verdicts: dict[str, Verdict] = {}
    for name, ref in refs:
        got = fp if _same_tokens(fp, ref) else endpoint_fingerprint(ep, prompts, ref, meta=meta)
        verdicts[name] = compare(ref, got, tol)
    return fp, verdicts
