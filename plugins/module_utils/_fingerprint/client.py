"""What an OpenAI-compatible vLLM endpoint says of the fingerprint's tokens.

Two requests per prompt, both greedy (temperature 0):
- the teacher-forced log-probabilities of the reference's tokens: POST /v1/completions with the
  prompt and the reference continuation as token ids, `max_tokens: 1` and `prompt_logprobs: 2`
  (vLLM returns, per prompt position, the log-probability and rank of the token there and of
  the model's top 2; 0.6.6 and 0.32 both accept `prompt_logprobs` on /v1/completions and
  answer it in `choices[].prompt_logprobs`);
- the greedy continuation: /v1/completions on the prompt's token ids, or /v1/chat/completions
  on the chat messages, so the server's own chat template is exercised.
HTTP through ansible.module_utils.urls (open_url), like endpoint_check.py; over https the
node is verified with the endpoint's `tls` (CA bundle, client certificate: _tls_client.py).
"""

from __future__ import annotations

import json
import urllib.error
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible.module_utils.urls import ConnectionError as UrlConnectionError
from ansible.module_utils.urls import open_url

from .._tls_client import TlsClient, tls_reason
from .record import Prompt, Scored, left_out, needed, scored_start

BATCH = 8


@dataclass
class Endpoint:
    base_url: str
    api_key: str
    model: str
    timeout: float = 120.0
    tls: TlsClient = field(default_factory=TlsClient)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps({"model": self.model, **body}).encode()
        return self._call("POST", path, data)

    def get(self, path: str) -> dict[str, Any]:
        return self._call("GET", path, None)

    def _call(self, method: str, path: str, data: bytes | None) -> dict[str, Any]:
        root = self.base_url.rstrip("/").removesuffix("/v1")
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            with open_url(root + path, data=data, headers=headers, method=method,
                          timeout=self.timeout, **self.tls.open_url_kwargs()) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:400].decode(errors="replace")
            raise RuntimeError(f"{method} {path}: HTTP {exc.code}: {detail}") from exc
        except (urllib.error.URLError, UrlConnectionError, TimeoutError, OSError) as exc:
            raise RuntimeError(f"{method} {path}: {tls_reason(exc, self.tls) or exc}") from exc


def max_model_len(ep: Endpoint) -> int | None:
    """The server's context length for the model (vLLM's /v1/models says it as `max_model_len`;
    None from a server that does not)."""
    for card in ep.get("/v1/models").get("data") or []:
        if card.get("id") == ep.model and isinstance(card.get("max_model_len"), int):
            return int(card["max_model_len"])
    return None


def _chunks(items: Sequence[Any], size: int = BATCH) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def _choices(answer: dict[str, Any], n: int, path: str) -> list[dict[str, Any]]:
    choices = sorted(answer.get("choices") or [], key=lambda c: c.get("index", 0))
    if len(choices) != n:
        raise RuntimeError(f"{path}: {len(choices)} choices for {n} prompts")
    return choices


def position(entry: dict[str, Any] | None, token: int) -> tuple[float, int, float | None]:
    """(logprob of `token`, the top token, top-1 minus top-2 logprob) of one prompt_logprobs
    entry: a dict token id -> {logprob, rank, decoded_token}."""
    if not entry or str(token) not in entry:
        raise RuntimeError(f"prompt_logprobs has no entry for token {token}")
    by_rank = {int(v.get("rank") or 0): (int(k), float(v["logprob"])) for k, v in entry.items()}
    if 1 not in by_rank:
        raise RuntimeError("prompt_logprobs entry without a rank-1 token (vLLM too old?)")
    top, top_lp = by_rank[1]
    margin = top_lp - by_rank[2][1] if 2 in by_rank else None
    return float(entry[str(token)]["logprob"]), top, margin


def teacher_forced(ep: Endpoint, rows: list[tuple[list[int], int]]) -> list[
        tuple[list[float], list[int], list[float | None]]]:
    """For each (token ids, first scored position): logprobs, top ids and margins from there on."""
    out: list[tuple[list[float], list[int], list[float | None]]] = []
    for chunk in _chunks(rows):
        answer = ep.post("/v1/completions", {
            "prompt": [row[0] for row in chunk], "max_tokens": 1, "temperature": 0.0,
            "prompt_logprobs": 2})
        for (ids, start), choice in zip(chunk, _choices(answer, len(chunk), "teacher-forced"),
                                        strict=True):
            plp = choice.get("prompt_logprobs")
            if not plp or len(plp) != len(ids):
                raise RuntimeError("the endpoint returned no prompt_logprobs for every position: "
                                   "it needs vLLM's `prompt_logprobs` on /v1/completions")
            cols = [position(plp[j], ids[j]) for j in range(start, len(ids))]
            out.append(([c[0] for c in cols], [c[1] for c in cols], [c[2] for c in cols]))
    return out


@dataclass
class Greedy:
    """A greedy continuation: its text and, when the server returned them, its token ids."""

    text: str
    ids: list[int] | None


def _ids(choice: dict[str, Any]) -> list[int] | None:
    ids = choice.get("token_ids")
    return [int(t) for t in ids] if isinstance(ids, list) else None


def greedy(ep: Endpoint, prompts: list[Prompt], prompt_ids: list[list[int]],
           max_tokens: int) -> list[Greedy]:
    """The greedy continuation (text, token ids or None) of each prompt, chat prompts through the
    chat API. `return_token_ids` is answered by newer vLLM (0.32 has it); 0.6.6 ignores it."""
    found: dict[int, Greedy] = {}
    common = {"max_tokens": max_tokens, "temperature": 0.0, "return_token_ids": True}
    plain = [i for i, p in enumerate(prompts) if p.kind == "completion"]
    for chunk in _chunks(plain):
        answer = ep.post("/v1/completions", {"prompt": [prompt_ids[i] for i in chunk], **common})
        for i, choice in zip(chunk, _choices(answer, len(chunk), "greedy"), strict=True):
            found[i] = Greedy(choice.get("text") or "", _ids(choice))
    for i, p in enumerate(prompts):
        if p.kind == "chat":
            answer = ep.post("/v1/chat/completions", {"messages": p.messages, **common})
            choice = _choices(answer, 1, "chat")[0]
            found[i] = Greedy(choice["message"].get("content") or "", _ids(choice))
    return [found[i] for i in range(len(prompts))]


def tokenize(ep: Endpoint, prompt: Prompt) -> list[int]:
    """The prompt's token ids as the server renders them (POST /tokenize)."""
    body: dict[str, Any] = ({"prompt": prompt.prompt} if prompt.kind == "completion"
                            else {"messages": prompt.messages, "add_generation_prompt": True})
    return [int(t) for t in ep.post("/tokenize", body)["tokens"]]


def score(ep: Endpoint, prompts: list[Prompt], like: list[Scored], max_tokens: int,
          texts: list[Greedy] | None = None) -> list[Scored]:
    """Every prompt scored by the endpoint on the tokens of `like` (a reference's records);
    `texts`: the greedy continuations when already taken."""
    by_id = {p.id: p for p in prompts}
    prompts = [by_id[s.id] for s in like]
    rows = [(s.prompt_ids + s.ref_ids, s.start) for s in like]
    forced = teacher_forced(ep, rows)
    texts = texts or greedy(ep, prompts, [s.prompt_ids for s in like], max_tokens)
    return [Scored(id=s.id, kind=s.kind, prompt_ids=s.prompt_ids, ref_ids=s.ref_ids,
                   greedy_text=g.text, start=s.start, logprobs=lp, top_ids=top, margins=margin,
                   greedy_ids=g.ids)
            for s, (lp, top, margin), g in zip(like, forced, texts, strict=True)]


def _fitting(ep: Endpoint, prompts: list[Prompt], max_tokens: int, limit: int | None
             ) -> tuple[list[tuple[Prompt, list[int]]], list[dict[str, Any]]]:
    """The prompts (with their token ids) that fit in `limit` tokens of context; the others."""
    fits, out = [], []
    for p in prompts:
        ids = tokenize(ep, p)
        tokens = needed(len(ids), max_tokens)
        if limit is None or tokens <= limit:
            fits.append((p, ids))
        else:
            out.append(left_out(p.id, tokens, limit))
    return fits, out


def record(ep: Endpoint, prompts: list[Prompt], max_tokens: int, window: int,
           limit: int | None = None) -> tuple[list[Scored], list[dict[str, Any]]]:
    """A fingerprint from the endpoint alone (no other reference): the server's tokenization,
    its greedy continuation as the reference continuation (its token ids, or, from a vLLM that
    does not return them, its text tokenized again), then scored like any other. Prompts that
    need more context than `limit` (the server's max_model_len) are left out, and listed."""
    fits, out = _fitting(ep, prompts, max_tokens, limit)
    prompts, prompt_ids = [pair[0] for pair in fits], [pair[1] for pair in fits]
    texts = greedy(ep, prompts, prompt_ids, max_tokens)
    like = []
    for p, ids, g in zip(prompts, prompt_ids, texts, strict=True):
        body = {"prompt": g.text, "add_special_tokens": False}
        cont = g.ids if g.ids is not None else (
            [int(t) for t in ep.post("/tokenize", body)["tokens"]] if g.text else [])
        like.append(Scored(p.id, p.kind, ids, cont[:max_tokens], g.text,
                           scored_start(len(ids), window), [], [], []))
    return score(ep, prompts, like, max_tokens, texts), out
