"""The request fuzz's judge and sender (molecule/shared/request_fuzz.py), against a local
stand-in server: what counts as an answer, what does not (a 5xx, a 4xx without an OpenAI-style
error, a stream cut short, a 200 for an invalid request, no answer at all)."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "molecule" / "shared"))

import request_fuzz as rf  # pylint: disable=wrong-import-position

PLAIN = rf.Case("plain", rf.COMPLETIONS, {"model": "m", "prompt": "x"}, expect=rf.OK)
INVALID = rf.Case("bad", rf.COMPLETIONS, {"model": "m", "max_tokens": -1}, expect=rf.ERROR)
EITHER = rf.Case("either", rf.COMPLETIONS, {"model": "m", "best_of": 2})
STREAM = rf.Case("stream", rf.COMPLETIONS, {"model": "m", "stream": True}, expect=rf.OK,
                 stream=True)
RAW = rf.Case("raw", rf.COMPLETIONS, raw=b"\xff", expect=rf.ERROR, detail_ok=True)

OK_BODY = json.dumps({"choices": [{"text": "hi"}]}).encode()
NEW_ERROR = json.dumps({"error": {"message": "max_tokens must be at least 1", "type": "x"}})
OLD_ERROR = json.dumps({"object": "error", "message": "bad", "type": "x", "code": 400})


@pytest.mark.parametrize(
    ("case", "answer", "verdict"),
    [
        (PLAIN, rf.Answer(200, OK_BODY, 0.1), None),
        (PLAIN, rf.Answer(200, b"not json", 0.1), "not JSON"),
        (PLAIN, rf.Answer(200, b'{"object": "x"}', 0.1), "without choices"),
        (PLAIN, rf.Answer(400, NEW_ERROR.encode(), 0.1), "for an ordinary request"),
        (PLAIN, rf.Answer(500, NEW_ERROR.encode(), 0.1), "server error 500"),
        (EITHER, rf.Answer(500, NEW_ERROR.encode(), 0.1), "server error 500"),
        (INVALID, rf.Answer(503, OLD_ERROR.encode(), 0.1), "server error 503"),
        (PLAIN, rf.Answer(0, b"", 120.0, "TimeoutError: timed out"), "no answer"),
        (INVALID, rf.Answer(400, NEW_ERROR.encode(), 0.1), None),
        (INVALID, rf.Answer(400, OLD_ERROR.encode(), 0.1), None),
        (INVALID, rf.Answer(422, b'{"detail": "x"}', 0.1), "without an OpenAI-style error"),
        (INVALID, rf.Answer(200, OK_BODY, 0.1), "200 for an invalid request"),
        (INVALID, rf.Answer(502, b"<html>", 0.1), "server error 502"),
        (EITHER, rf.Answer(200, OK_BODY, 0.1), None),
        (EITHER, rf.Answer(400, OLD_ERROR.encode(), 0.1), None),
        (RAW, rf.Answer(400, b'{"detail": "There was an error parsing the body"}', 0.1), None),
        (STREAM, rf.Answer(200, b'data: {"choices": []}\n\ndata: [DONE]\n\n', 0.1), None),
        (STREAM, rf.Answer(200, b'data: {"choices": []}\n\n', 0.1), "did not end"),
        (STREAM, rf.Answer(200, b'data: {"error": {"code": 500, "message": "dead"}}\n\n'
                           b"data: [DONE]\n\n", 0.1), "server error"),
    ],
)
def test_problem(case: rf.Case, answer: rf.Answer, verdict: str | None) -> None:
    found = rf.problem(case, answer)
    if verdict is None:
        assert found is None
    else:
        assert found is not None and verdict in found


def test_every_case_is_named_once_and_serialisable() -> None:
    cases = rf.all_cases("m", 8)
    names = [c.name for c in cases]
    assert len(names) == len(set(names))
    assert {n.split("/")[0] for n in names} == {"completions", "chat", "body"}
    for case in cases:
        assert isinstance(case.payload(), bytes)
    # the ordinary parameters the issue names are all there
    for name in ("completions/logprobs-1", "chat/top-logprobs", "completions/prompt-logprobs-1",
                 "completions/echo", "completions/n-2", "completions/best-of-2",
                 "completions/stop-list", "completions/seed", "completions/penalties",
                 "completions/logit-bias", "chat/response-format-json-schema",
                 "completions/guided-json", "chat/tools-named", "chat/stream-include-usage",
                 "completions/max-tokens-0", "completions/max-tokens-negative",
                 "completions/max-tokens-huge", "completions/prompt-over-max-model-len",
                 "completions/prompt-empty", "completions/prompt-token-ids",
                 "body/invalid-utf8", "completions/unknown-field", "completions/max-tokens-string",
                 "body/prompt-2-mb"):
        assert name in names, name


class _Handler(BaseHTTPRequestHandler):
    seen: list[tuple[str, bytes, str | None]] = []

    def do_POST(self) -> None:
        if self.headers.get("Transfer-Encoding") == "chunked":
            body = b""
            while (size := int(self.rfile.readline().strip(), 16)) > 0:
                body += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.seen.append((self.path, body, self.headers.get("Authorization")))
        if self.path == "/hang":
            threading.Event().wait(5)
        reply = OK_BODY if body.startswith(b"{") else NEW_ERROR.encode()
        self.send_response(200 if body.startswith(b"{") else 400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Handler.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_send_posts_the_exact_bytes_with_the_key(server: str) -> None:
    answer = rf.send(server, "k-1", RAW)
    assert answer.status == 400
    assert _Handler.seen == [(rf.COMPLETIONS, b"\xff", "Bearer k-1")]
    chunked = rf.Case("c", rf.COMPLETIONS, {"a": 1}, chunked=True)
    assert rf.send(server, "k-1", chunked).status == 200
    assert _Handler.seen[-1][1] == b'{"a": 1}'


def test_send_reports_no_answer_on_timeout(server: str) -> None:
    hang = rf.Case("hang", "/hang", {"a": 1})
    answer = rf.send(server, "k", hang, timeout=0.5)
    assert answer.status == 0 and "timed out" in answer.error


def test_run_collects_every_problem(server: str) -> None:
    found = rf.run(server, "k", [PLAIN, INVALID, RAW])
    assert set(found) == {INVALID.name}  # the stand-in answers 200 to anything JSON
