"""The fingerprint record: per prompt the tokens that were scored and what a model said of them.

A fingerprint is plain JSON (a reference, a node's fingerprint and a fleet baseline share the
shape), so it can be written to a directory, returned by a module and kept in set_stats.
Standard library only.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

FORMAT = 1
KINDS = ("completion", "chat")


@dataclass
class Prompt:
    """One fixed prompt: a completion text or a list of chat messages."""

    id: str
    kind: str
    prompt: str = ""
    messages: list[dict[str, str]] = field(default_factory=list)


@dataclass
class Scored:
    """One prompt as scored by one model.

    prompt_ids + ref_ids is the teacher-forced sequence; the scored positions are the last
    `window` prompt tokens and every reference token. For each scored position: the log-probability
    of the token there (`logprobs`), the model's own top token (`top_ids`) and the gap between its
    best and second-best log-probability (`margins`, None when the source did not say).
    `greedy_ids` are the greedy continuation's token ids when the source gave them (transformers
    always; vLLM when it knows `return_token_ids`), else None.
    """

    id: str
    kind: str
    prompt_ids: list[int]
    ref_ids: list[int]
    greedy_text: str
    start: int
    logprobs: list[float]
    top_ids: list[int]
    margins: list[float | None]
    greedy_ids: list[int] | None = None


@dataclass
class Fingerprint:
    """Every prompt scored by one source (transformers, or an endpoint)."""

    source: str
    model: str
    prompts_sha256: str
    max_tokens: int
    window: int
    scored: list[Scored]
    meta: dict[str, Any] = field(default_factory=dict)
    left_out: list[dict[str, Any]] = field(default_factory=list)
    format: int = FORMAT

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def within(self, limit: int | None) -> Fingerprint:
        """This fingerprint without the prompts that need more context than `limit` tokens (a
        server's max_model_len; None: no limit); those are listed in `left_out`."""
        if limit is None:
            return self
        keep, out = [], list(self.left_out)
        for s in self.scored:
            tokens = needed(len(s.prompt_ids), self.max_tokens, len(s.ref_ids))
            if tokens <= limit:
                keep.append(s)
            else:
                out.append(left_out(s.id, tokens, limit))
        return replace(self, scored=keep, left_out=out)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fingerprint:
        if data.get("format") != FORMAT:
            raise ValueError(f"fingerprint format {data.get('format')!r} is not {FORMAT}")
        scored = [Scored(**s) for s in data["scored"]]
        rest = {k: v for k, v in data.items() if k != "scored"}
        return cls(scored=scored, **rest)


def parse_prompts(data: Any) -> list[Prompt]:
    """The prompt list of files/fingerprint/prompts.yml (already parsed), checked."""
    items = data.get("prompts") if isinstance(data, dict) else data
    if not isinstance(items, list) or not items:
        raise ValueError("prompts: expected a non-empty list of prompts")
    out: list[Prompt] = []
    for item in items:
        p = Prompt(id=str(item["id"]), kind=str(item["kind"]), prompt=item.get("prompt", ""),
                   messages=list(item.get("messages", [])))
        if p.kind not in KINDS:
            raise ValueError(f"prompt {p.id}: kind {p.kind!r} is not one of {KINDS}")
        if (p.kind == "completion") != bool(p.prompt) or (p.kind == "chat") != bool(p.messages):
            raise ValueError(f"prompt {p.id}: a completion has `prompt`, a chat has `messages`")
        out.append(p)
    if len({p.id for p in out}) != len(out):
        raise ValueError("prompts: ids must be unique")
    return out


def prompts_sha256(prompts: list[Prompt]) -> str:
    """Hash of the prompt set: fingerprints compare only when it is the same."""
    text = json.dumps([asdict(p) for p in prompts], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def needed(prompt_len: int, max_tokens: int, ref_len: int | None = None) -> int:
    """Tokens of context a prompt takes: vLLM refuses a request whose prompt plus max_tokens
    exceeds max_model_len, so the greedy request takes prompt + max_tokens and the
    teacher-forced one prompt + reference + 1; before the reference is known, it is taken at its
    longest (max_tokens)."""
    ref = max_tokens if ref_len is None else ref_len
    return prompt_len + max(max_tokens, ref + 1)


def left_out(prompt_id: str, tokens: int, limit: int) -> dict[str, Any]:
    """A prompt left out because the server's context is too short for it."""
    return {"id": prompt_id, "tokens": tokens, "max_model_len": limit}


def left_out_text(items: list[dict[str, Any]]) -> str:
    """The prompts left out, for a verdict's summary."""
    names = ", ".join(f"{x['id']} ({x['tokens']} tokens)" for x in items[:5])
    more = f" and {len(items) - 5} more" if len(items) > 5 else ""
    limit = items[0]["max_model_len"] if items else 0
    return (f"{len(items)} prompts left out, longer than the server's max_model_len "
            f"{limit}: {names}{more}")


def scored_start(prompt_len: int, window: int) -> int:
    """First scored position: `window` prompt tokens before the continuation (never 0)."""
    return max(1, prompt_len - window)
