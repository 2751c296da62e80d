"""The verdict: a fingerprint against a reference, prompt by prompt, within per-dtype tolerances.

Per prompt, over the scored positions: token agreement (the share of positions where both
models' top token is the same, positions where the reference itself nearly ties being left
out), max and mean |delta logprob| of the scored tokens, and whether the greedy continuation is
the same text. Standard library only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .record import Fingerprint, Scored, left_out_text

# Defaults (docs/fingerprint.md, "Tolerances"): |delta logprob| in nats.
DEFAULT_TOLERANCES: dict[str, dict[str, float]] = {
    "float32": {"max_abs": 0.001, "mean_abs": 0.0002, "min_agreement": 1.0,
                "max_greedy_mismatch": 0.0, "tie": 0.001},
    "float16": {"max_abs": 0.05, "mean_abs": 0.01, "min_agreement": 0.98,
                "max_greedy_mismatch": 0.1, "tie": 0.05},
    "bfloat16": {"max_abs": 0.15, "mean_abs": 0.03, "min_agreement": 0.95,
                 "max_greedy_mismatch": 0.2, "tie": 0.15},
}


UNDECODABLE = "\ufffd"


@dataclass(frozen=True)
class Tolerance:
    max_abs: float
    mean_abs: float
    min_agreement: float
    max_greedy_mismatch: float
    tie: float


def tolerance_for(dtype: str, overrides: dict[str, dict[str, float]] | None = None) -> Tolerance:
    """The tolerance of a served dtype: the defaults, with `overrides[dtype]` merged over them."""
    if dtype not in DEFAULT_TOLERANCES and dtype not in (overrides or {}):
        raise ValueError(f"dtype {dtype!r} has no tolerance; known: {sorted(DEFAULT_TOLERANCES)}")
    values = dict(DEFAULT_TOLERANCES.get(dtype, DEFAULT_TOLERANCES["float32"]))
    values.update((overrides or {}).get(dtype, {}))
    return Tolerance(**{k: float(values[k]) for k in Tolerance.__dataclass_fields__})


@dataclass
class PromptVerdict:
    id: str
    ok: bool
    agreement: float
    max_abs: float
    mean_abs: float
    greedy_match: bool | None
    positions: int
    problems: list[str] = field(default_factory=list)


@dataclass
class Verdict:
    ok: bool
    summary: str
    prompts: list[PromptVerdict]
    max_abs: float
    mean_abs: float
    agreement: float
    greedy_mismatches: int
    tolerance: dict[str, float]
    left_out: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _same_tokens(ref: Scored, got: Scored) -> str | None:
    if (ref.prompt_ids, ref.ref_ids, ref.start) != (got.prompt_ids, got.ref_ids, got.start):
        return "scored other tokens than the reference"
    if len(got.logprobs) != len(ref.logprobs) or len(got.top_ids) != len(ref.top_ids):
        return f"{len(got.logprobs)} scored positions, the reference has {len(ref.logprobs)}"
    return None


def greedy_match(ref: Scored, got: Scored) -> bool | None:
    """Same greedy continuation: by token ids when both sides gave them (a model's EOS ends
    both), else by text; None (not comparable) when the text holds undecodable bytes (U+FFFD),
    which vLLM's incremental detokenizer and a one-shot decode render differently."""
    if ref.greedy_ids is not None and got.greedy_ids is not None:
        return ref.greedy_ids == got.greedy_ids
    if UNDECODABLE in ref.greedy_text or UNDECODABLE in got.greedy_text:
        return None
    return ref.greedy_text == got.greedy_text


def compare_prompt(ref: Scored, got: Scored, tol: Tolerance) -> PromptVerdict:
    """One prompt's verdict; `got` must have scored the reference's own tokens."""
    mismatch = _same_tokens(ref, got)
    if mismatch:
        return PromptVerdict(ref.id, False, 0.0, float("inf"), float("inf"), False, 0, [mismatch])
    deltas = [abs(a - b) for a, b in zip(ref.logprobs, got.logprobs, strict=True)]
    counted = [i for i, m in enumerate(ref.margins) if m is None or m >= tol.tie]
    agree = sum(ref.top_ids[i] == got.top_ids[i] for i in counted)
    v = PromptVerdict(
        id=ref.id, ok=True, agreement=agree / len(counted) if counted else 1.0,
        max_abs=max(deltas, default=0.0), mean_abs=sum(deltas) / len(deltas) if deltas else 0.0,
        greedy_match=greedy_match(ref, got), positions=len(deltas))
    if v.agreement < tol.min_agreement:
        v.problems.append(f"token agreement {v.agreement:.3f} < {tol.min_agreement}")
    if v.max_abs > tol.max_abs:
        v.problems.append(f"max |delta logprob| {v.max_abs:.3g} > {tol.max_abs}")
    if v.mean_abs > tol.mean_abs:
        v.problems.append(f"mean |delta logprob| {v.mean_abs:.3g} > {tol.mean_abs}")
    v.ok = not v.problems
    return v


def _check_comparable(reference: Fingerprint, got: Fingerprint) -> None:
    if reference.prompts_sha256 != got.prompts_sha256:
        raise ValueError("the fingerprint and the reference were taken with different prompt sets "
                         f"({got.prompts_sha256[:12]} vs {reference.prompts_sha256[:12]}): "
                         "record the reference again with the prompts shipped now")
    if [s.id for s in reference.scored] != [s.id for s in got.scored]:
        raise ValueError("the fingerprint and the reference list different prompts")


def compare(reference: Fingerprint, got: Fingerprint, tol: Tolerance) -> Verdict:
    """The fingerprint `got` against `reference`: ok when every prompt is within tolerance and
    no more than tol.max_greedy_mismatch of the prompts continue greedily to another text."""
    _check_comparable(reference, got)
    if not reference.scored:
        raise ValueError(f"no prompt to compare: {left_out_text(reference.left_out)}")
    per = [compare_prompt(r, g, tol) for r, g in zip(reference.scored, got.scored, strict=True)]
    n_pos = sum(p.positions for p in per) or 1
    mismatches = sum(p.greedy_match is False for p in per)
    greedy_ok = mismatches <= tol.max_greedy_mismatch * len(per)
    failed = [p for p in per if not p.ok]
    verdict = Verdict(
        ok=not failed and greedy_ok, summary="", prompts=per,
        max_abs=max(p.max_abs for p in per),
        mean_abs=sum(p.mean_abs * p.positions for p in per) / n_pos,
        agreement=sum(p.agreement * p.positions for p in per) / n_pos,
        greedy_mismatches=mismatches, tolerance=asdict(tol), left_out=list(reference.left_out))
    verdict.summary = _summary(verdict, failed, greedy_ok, len(per))
    return verdict


def _summary(v: Verdict, failed: list[PromptVerdict], greedy_ok: bool, n: int) -> str:
    head = (f"{n - len(failed)}/{n} prompts within tolerance; max |delta logprob| {v.max_abs:.3g}, "
            f"mean {v.mean_abs:.3g}, token agreement {v.agreement:.4f}, "
            f"greedy continuation differs on {v.greedy_mismatches}/{n}")
    notes = [f"{p.id}: {'; '.join(p.problems)}" for p in failed[:5]]
    if not greedy_ok:
        notes.append(f"greedy continuation differs on {v.greedy_mismatches}/{n} prompts "
                     f"(at most {v.tolerance['max_greedy_mismatch']:.0%} allowed)")
    if v.left_out:
        head += f"; {left_out_text(v.left_out)}"
    return head + ("" if v.ok else " - FAILED: " + " | ".join(notes))
