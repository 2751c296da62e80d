"""Checks an OpenAI-compatible vLLM endpoint from the outside, as a client would.

Standard library at import time; the checks that speak the OpenAI API import the `openai`
SDK when they run (the controller venv has it), so this file imports without it. Over https
both transports verify the node with `tls` (CA bundle, client certificate: _tls_client.py).
Each check returns a CheckResult naming what was checked and, on failure, why.
"""

from __future__ import annotations

import json
import time
import urllib.error
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ansible.module_utils.urls import open_url

from ._tls_client import TLS_REQUIRED_TOGETHER, TLS_SPEC, TlsClient, TlsConfigError, tls_reason

__all__ = [
    "ALL_CHECKS", "CHECKS", "PROMPT", "TLS_REQUIRED_TOGETHER", "TLS_SPEC", "CheckFailed",
    "CheckResult", "Endpoint", "TlsClient", "TlsConfigError", "check_auth_required", "check_chat",
    "check_chat_stream", "check_health", "check_models", "check_tokenize", "describe", "http",
    "resolve_model", "run_checks", "summary",
]

ALL_CHECKS: tuple[str, ...] = (
    "health",
    "models",
    "chat",
    "chat_stream",
    "tokenize",
    "auth_required",
)
PROMPT = "Say hello."


@dataclass
class CheckResult:
    name: str
    ok: bool
    detail: str
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Endpoint:
    base_url: str
    api_key: str
    model: str = ""
    timeout: float = 60.0
    max_tokens: int = 8
    tls: TlsClient = field(default_factory=TlsClient)
    _models: list[str] = field(default_factory=list)

    @property
    def root(self) -> str:
        return self.base_url.rstrip("/").removesuffix("/v1")

    def openai_client(self, api_key: str | None = None) -> Any:
        import openai  # deferred: only the API checks need the SDK

        return openai.OpenAI(
            base_url=self.root + "/v1",
            api_key=self.api_key if api_key is None else api_key,
            timeout=self.timeout,
            max_retries=0,
            http_client=self.tls.openai_http_client() if self.tls != TlsClient() else None,
        )


class CheckFailed(Exception):
    """A check's expectation did not hold; the message says why."""


def http(
    endpoint: Endpoint,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    api_key: str | None = None,
) -> tuple[int, bytes]:
    """Plain HTTP request; returns (status, body) for any status, raises on no answer."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if data is not None else {}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    try:
        resp = open_url(
            endpoint.root + path,
            data=data,
            headers=headers,
            method=method,
            timeout=endpoint.timeout,
            use_proxy=False,
            **endpoint.tls.open_url_kwargs(),
        )
        with resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def check_health(ep: Endpoint) -> str:
    status, _body = http(ep, "GET", "/health")
    if status != 200:
        raise CheckFailed(f"GET /health answered {status}, expected 200")
    return "GET /health 200"


def resolve_model(ep: Endpoint) -> str:
    if not ep._models:
        ep._models = [m.id for m in ep.openai_client().models.list().data]
    if ep.model:
        if ep.model not in ep._models:
            raise CheckFailed(f"model {ep.model!r} is not served; /v1/models lists {ep._models}")
        return ep.model
    if not ep._models:
        raise CheckFailed("/v1/models lists no model")
    return ep._models[0]


def check_models(ep: Endpoint) -> str:
    ep._models = []
    model = resolve_model(ep)
    return f"/v1/models lists {ep._models}; using {model!r}"


def _chat(ep: Endpoint, **extra: Any) -> Any:
    """The one chat request both chat checks send (plain or streamed)."""
    return ep.openai_client().chat.completions.create(
        model=resolve_model(ep),
        messages=[{"role": "user", "content": PROMPT}],
        max_tokens=ep.max_tokens,
        temperature=0,
        **extra,
    )


def check_chat(ep: Endpoint) -> str:
    resp = _chat(ep)
    if not resp.choices:
        raise CheckFailed("chat completion returned no choices")
    choice = resp.choices[0]
    tokens = resp.usage.completion_tokens if resp.usage else None
    if not tokens:
        raise CheckFailed(f"chat completion generated no tokens (usage {resp.usage})")
    if choice.message is None or choice.message.content is None:
        raise CheckFailed("chat completion has no message content")
    return f"{tokens} tokens, finish_reason={choice.finish_reason}"


def check_chat_stream(ep: Endpoint) -> str:
    stream = _chat(ep, stream=True)
    chunks = 0
    pieces: list[str] = []
    finish: str | None = None
    for chunk in stream:  # read to the end ([DONE])
        chunks += 1
        for choice in chunk.choices:
            if choice.delta is not None and choice.delta.content:
                pieces.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    if chunks == 0:
        raise CheckFailed("streamed chat completion sent no chunks")
    if finish is None:
        raise CheckFailed(f"stream ended after {chunks} chunks without a finish_reason")
    return f"{chunks} chunks, {len(''.join(pieces))} characters, finish_reason={finish}"


def check_tokenize(ep: Endpoint) -> str:
    model = resolve_model(ep)
    status, body = http(ep, "POST", "/tokenize", {"model": model, "prompt": PROMPT}, ep.api_key)
    if status != 200:
        raise CheckFailed(f"POST /tokenize answered {status}: {body[:200]!r}")
    tokens = json.loads(body).get("tokens")
    if not isinstance(tokens, list) or not tokens:
        raise CheckFailed(f"POST /tokenize returned no tokens: {body[:200]!r}")
    return f"{len(tokens)} tokens for {PROMPT!r}"


def check_auth_required(ep: Endpoint) -> str:
    status, _body = http(ep, "GET", "/v1/models")
    if status != 401:
        raise CheckFailed(f"GET /v1/models without a key answered {status}, expected 401")
    wrong, _body = http(ep, "GET", "/v1/models", api_key="wrong-" + "x" * 16)
    if wrong != 401:
        raise CheckFailed(f"GET /v1/models with a wrong key answered {wrong}, expected 401")
    return "401 without a key and with a wrong key"


CHECKS: dict[str, Callable[[Endpoint], str]] = {
    "health": check_health,
    "models": check_models,
    "chat": check_chat,
    "chat_stream": check_chat_stream,
    "tokenize": check_tokenize,
    "auth_required": check_auth_required,
}


def describe(exc: BaseException, client: TlsClient | None = None) -> str:
    """A one-line reason for an exception, without secrets (the key is never in it); a TLS
    failure says what to set (`client`: the TLS options the check used)."""
    if isinstance(exc, CheckFailed):
        return str(exc)
    tls = tls_reason(exc, client)
    if tls:
        return tls
    status = getattr(exc, "status_code", None)
    text = str(exc).splitlines()[0] if str(exc) else ""
    kind = type(exc).__name__
    if status is not None:
        return f"{kind} (HTTP {status}): {text}"
    return f"{kind}: {text}" if text else kind


def run_checks(ep: Endpoint, names: list[str] | tuple[str, ...] = ALL_CHECKS) -> list[CheckResult]:
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise ValueError(f"unknown checks {unknown}; known: {list(CHECKS)}")
    results = []
    for name in names:
        start = time.monotonic()
        try:
            detail, ok = CHECKS[name](ep), True
        except Exception as exc:
            detail, ok = describe(exc, ep.tls), False
        results.append(CheckResult(name, ok, detail, round(time.monotonic() - start, 3)))
    return results


def summary(results: list[CheckResult]) -> str:
    failed = [r for r in results if not r.ok]
    if not failed:
        return f"all {len(results)} checks passed"
    return "; ".join(f"{r.name} failed: {r.detail}" for r in failed)
