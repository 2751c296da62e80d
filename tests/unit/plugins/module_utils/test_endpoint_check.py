"""endpoint_check against a small fake OpenAI-compatible server (real HTTP, real SDK)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from ansible_collections.instinct.vllm.plugins.module_utils.endpoint_check import (
    ALL_CHECKS,
    Endpoint,
    run_checks,
    summary,
)

KEY = "k" * 32


class FakeVllm(BaseHTTPRequestHandler):
    behaviour: dict[str, Any] = {}

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, payload: Any) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _authorised(self) -> bool:
        if self.behaviour.get("no_auth"):
            return True
        return self.headers.get("Authorization") == f"Bearer {KEY}"

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(self.behaviour.get("health", 200), {})
        elif self.path == "/v1/models":
            if not self._authorised():
                self._send(401, {"error": "Unauthorized"})
                return
            self._send(200, {"object": "list", "data": [
                {"id": m, "object": "model", "created": 0, "owned_by": "vllm"}
                for m in self.behaviour.get("models", ["tiny"])]})
        else:
            self._send(404, {})

    def do_POST(self) -> None:
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":
            self._send(200, {"tokens": [] if self.behaviour.get("no_tokens") else [1, 2, 3],
                             "count": 3, "max_model_len": 64})
            return
        if self.path != "/v1/chat/completions" or not self._authorised():
            self._send(401, {"error": "Unauthorized"})
            return
        if req.get("stream"):
            self._stream(req)
            return
        tokens = self.behaviour.get("completion_tokens", 3)
        self._send(200, {
            "id": "c1", "object": "chat.completion", "created": 0, "model": req["model"],
            "choices": [{"index": 0, "finish_reason": "length",
                         "message": {"role": "assistant", "content": "abc"}}],
            "usage": {"prompt_tokens": 4, "completion_tokens": tokens, "total_tokens": 4 + tokens}})

    def _stream(self, req: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i, piece in enumerate(["a", "b", "c"]):
            last = i == 2 and not self.behaviour.get("no_finish")
            chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 0,
                     "model": req["model"],
                     "choices": [{"index": 0, "delta": {"content": piece},
                                  "finish_reason": "length" if last else None}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture
def server() -> Iterator[tuple[str, dict[str, Any]]]:
    behaviour: dict[str, Any] = {}
    handler = type("H", (FakeVllm,), {"behaviour": behaviour})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", behaviour
    httpd.shutdown()


def results_by_name(url: str, **kw: Any) -> dict[str, Any]:
    return {r.name: r for r in run_checks(Endpoint(url, KEY, timeout=5, **kw))}


def test_all_checks_pass_on_a_healthy_server(server: tuple[str, dict[str, Any]]) -> None:
    url, _server = server
    results = run_checks(Endpoint(url + "/v1", KEY, "tiny", timeout=5))
    assert [r.name for r in results] == list(ALL_CHECKS)
    assert all(r.ok for r in results), summary(results)
    assert summary(results) == "all 6 checks passed"


def test_open_endpoint_fails_the_auth_check(server: tuple[str, dict[str, Any]]) -> None:
    url, behaviour = server
    behaviour["no_auth"] = True
    res = results_by_name(url)
    assert not res["auth_required"].ok
    assert "answered 200, expected 401" in res["auth_required"].detail
    assert res["chat"].ok


def test_unhealthy_server(server: tuple[str, dict[str, Any]]) -> None:
    url, behaviour = server
    behaviour["health"] = 503
    res = results_by_name(url)
    assert not res["health"].ok and "503" in res["health"].detail


def test_wrong_model_is_named(server: tuple[str, dict[str, Any]]) -> None:
    url, _server = server
    res = results_by_name(url, model="gpt-oss-120b")
    assert not res["models"].ok
    assert "'gpt-oss-120b' is not served" in res["models"].detail
    assert "tiny" in res["models"].detail


def test_wrong_key_is_reported_with_http_status(server: tuple[str, dict[str, Any]]) -> None:
    url, _server = server
    results = run_checks(Endpoint(url, "wrong" * 4, timeout=5), ["models", "chat"])
    assert not any(r.ok for r in results)
    assert "401" in results[0].detail
    assert "wrong" not in summary(results)


def test_stream_without_finish_reason_fails(server: tuple[str, dict[str, Any]]) -> None:
    url, behaviour = server
    behaviour["no_finish"] = True
    res = results_by_name(url)
    assert not res["chat_stream"].ok
    assert "without a finish_reason" in res["chat_stream"].detail


def test_empty_generation_and_tokenize(server: tuple[str, dict[str, Any]]) -> None:
    url, behaviour = server
    behaviour["completion_tokens"] = 0
    behaviour["no_tokens"] = True
    res = results_by_name(url)
    assert not res["chat"].ok and "no tokens" in res["chat"].detail
    assert not res["tokenize"].ok


def test_nothing_listening() -> None:
    results = run_checks(Endpoint("http://127.0.0.1:9", KEY, timeout=2), ["health", "models"])
    assert not any(r.ok for r in results)
    assert "health failed" in summary(results)


def test_unknown_check_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown checks"):
        run_checks(Endpoint("http://x", KEY), ["nope"])
