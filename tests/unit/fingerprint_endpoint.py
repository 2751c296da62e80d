"""A stand-in vLLM endpoint for the fingerprint's tests: it answers what the fingerprint asks
(/tokenize, greedy completions and chats with token ids, teacher-forced prompt_logprobs per
position) the way vLLM shapes those answers, with every log-probability moved by `shift` (0: the
same answers every time); /v1/models says its `max_model_len`, and a request longer than that is
refused with HTTP 400 as vLLM refuses it; with a `pki` (tls_pki.py) it serves only mutual TLS,
as a node with a certificate does. Used by the module's tests and acceptance's check
fingerprint."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tls_pki import Pki, serve_mtls

KEY = "fp-test-key"


def _entry(token: int, shift: float) -> dict[str, Any]:
    """Top token 3 (-0.5), then 4 (-0.9); any other token -2.0 at rank 5."""
    out = {"3": {"logprob": -0.5 + shift, "rank": 1}, "4": {"logprob": -0.9, "rank": 2}}
    if str(token) not in out:
        out[str(token)] = {"logprob": -2.0 + shift, "rank": 5}
    return out


class Handler(BaseHTTPRequestHandler):
    """The endpoint; `shift` and `seen` (path and body of every request) are per server."""

    shift = 0.0
    max_model_len = 4096
    seen: list[tuple[str, dict[str, Any]]] = []

    def do_GET(self) -> None:
        if self.path != "/v1/models":
            self._reply({"error": "not found"}, 404)
            return
        self._reply({"object": "list", "data": [
            {"id": name, "object": "model", "max_model_len": self.max_model_len}
            for name in ("demo", "gptoss-legacy-demo")]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.headers.get("Authorization") != f"Bearer {KEY}":
            self._reply({"error": "unauthorized"}, 401)
            return
        self.seen.append((self.path, body))
        too_long = self._too_long(self.path, body)
        if too_long:
            self._reply({"object": "error", "message": too_long, "code": 400}, 400)
            return
        self._reply(self._answer(self.path, body))

    def _too_long(self, path: str, body: dict[str, Any]) -> str:
        """vLLM's refusal (serving_engine._validate_input) of prompt + max_tokens > limit."""
        if path == "/tokenize":
            return ""
        prompts = ([self._answer("/tokenize", body)["tokens"]] if path == "/v1/chat/completions"
                   else body["prompt"])
        longest = max(len(ids) for ids in prompts) + body["max_tokens"]
        if longest <= self.max_model_len:
            return ""
        return (f"This model's maximum context length is {self.max_model_len} tokens. "
                f"However, you requested {longest} tokens")

    def _answer(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path == "/tokenize":
            text = body.get("prompt") or json.dumps(body["messages"])
            special = [1] if body.get("add_special_tokens", True) else []
            return {"tokens": special + [5 + ord(c) % 50 for c in text[:40]]}
        if path == "/v1/chat/completions":
            return {"choices": [{"index": 0, "message": {"content": "cc"}, "token_ids": [3, 3]}]}
        if body["max_tokens"] > 1:  # greedy
            return {"choices": [{"index": i, "text": "cc", "token_ids": [3, 3]}
                                for i in range(len(body["prompt"]))]}
        return {"choices": [
            {"index": i, "text": "c",
             "prompt_logprobs": [None] + [_entry(t, self.shift) for t in ids[1:]]}
            for i, ids in enumerate(body["prompt"])]}

    def _reply(self, data: dict[str, Any], status: int = 200) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def stand_in(shift: float = 0.0, max_model_len: int = 4096, pki: Pki | None = None
             ) -> Iterator[tuple[str, type[Handler]]]:
    """A running stand-in endpoint: its base URL (…/v1; https with `pki`) and its handler class
    (`seen`, `shift` may be changed while it runs)."""
    handler = type("ShiftedHandler", (Handler,), {"shift": shift, "seen": [],
                                                  "max_model_len": max_model_len})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if pki is not None:
        serve_mtls(httpd, pki)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    scheme = "https" if pki is not None else "http"
    try:
        yield f"{scheme}://127.0.0.1:{httpd.server_address[1]}/v1", handler
    finally:
        httpd.shutdown()
        httpd.server_close()
