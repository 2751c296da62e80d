"""The saturation driver (molecule/shared/saturate.py) against a local stand-in server whose
completions take MARKER_DELAY seconds for 1 token and LOAD_DELAY for more: the hold starts once
a 1-token request waited longer than the target; a request still waiting at the hold's end is
cut there (counted as cut, not failed, and not waited for); an error answer still counts as a
failure.

The timeline (seconds from the start; half a second of slack at every edge): the marker waits
1.5 > target 1.0, so the hold runs from 1.5 to 3.5. The clients' first requests, sent before
the hold, end at 3.0; their second ones would end at 6.0 and are cut at 4.0. The second marker
ends at 3.0; the third would end at 4.5 and is cut at 4.0."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

DRIVER = Path(__file__).resolve().parents[2] / "molecule" / "shared" / "saturate.py"
MARKER_DELAY = 1.5
LOAD_DELAY = 3.0
TARGET = 1.0
HOLD = 2.0


class StandIn(BaseHTTPRequestHandler):
    status = 200

    def log_message(self, *_args: object) -> None:
        pass

    def answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the client went away (a cut request)

    def do_GET(self) -> None:
        self.answer(200, {"data": [{"id": "m"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        time.sleep(MARKER_DELAY if body["max_tokens"] == 1 else LOAD_DELAY)
        status = self.server.status  # type: ignore[attr-defined]
        self.answer(status, {"choices": [{"text": "x"}]} if status == 200 else {"error": "x"})


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    httpd.daemon_threads = True
    httpd.status = 200  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()


def run(server: ThreadingHTTPServer, tmp_path: Path) -> dict:
    env_file = tmp_path / "vllm.env"
    env_file.write_text("VLLM_API_KEY=k\n")
    command = [
        sys.executable, str(DRIVER), "--url", f"http://127.0.0.1:{server.server_port}",
        "--env-file", str(env_file), "--seconds", str(HOLD), "--ramp-limit", "30",
        "--target", str(TARGET), "--clients", "2", "--max-clients", "2", "--marker-interval", "0.1",
    ]  # fmt: skip
    out = subprocess.run(command, check=True, capture_output=True, text=True, timeout=60).stdout
    return json.loads(out.splitlines()[-1])


def test_a_request_waiting_at_the_holds_end_is_cut_not_failed(server, tmp_path) -> None:
    result = run(server, tmp_path)
    assert result["failures"] == 0, result["failure_examples"]
    assert result["markers"][0] > TARGET and result["hold_seconds"] == HOLD, result
    # answered: the clients' first requests and two markers; waited for, the cut ones would
    # have been answered too (7 requests, none cut)
    assert (result["requests"], result["cut"]) == (4, 3), result


def test_an_error_answer_still_counts_as_a_failure(server, tmp_path) -> None:
    server.status = 500  # type: ignore[attr-defined]
    result = run(server, tmp_path)
    assert result["failures"] == 4 and result["cut"] == 3, result
    assert "HTTP Error 500" in result["failure_examples"][0]
