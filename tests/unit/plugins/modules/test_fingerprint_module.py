"""The module instinct.vllm.fingerprint and the client behind it against a stand-in endpoint
that speaks vLLM's answers (prompt_logprobs per position, /tokenize, return_token_ids): what it
sends, what it reads, the baseline verdict and a shifted endpoint failing it. The real vLLM is
in tests/unit/test_fingerprint_vllm.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args
from ansible_collections.instinct.vllm.plugins.modules import fingerprint

ROOT = Path(__file__).resolve().parents[4]
PROMPTS = yaml.safe_load((ROOT / "files" / "fingerprint" / "prompts.yml").read_text())["prompts"]
KEY = "fp-test-key"


def _entry(token: int, shift: float) -> dict[str, Any]:
    """Top token 3 (-0.5), then 4 (-0.9); any other token -2.0 at rank 5."""
    out = {"3": {"logprob": -0.5 + shift, "rank": 1}, "4": {"logprob": -0.9, "rank": 2}}
    if str(token) not in out:
        out[str(token)] = {"logprob": -2.0 + shift, "rank": 5}
    return out


class _Handler(BaseHTTPRequestHandler):
    shift = 0.0
    seen: list[tuple[str, dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert self.headers["Authorization"] == f"Bearer {KEY}"
        self.seen.append((self.path, body))
        self._reply(self._answer(self.path, body))

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

    def _reply(self, data: dict[str, Any]) -> None:
        raw = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[str]:
    _Handler.seen, _Handler.shift = [], 0.0
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def run(capsys: pytest.CaptureFixture[str], base_url: str, **args: object) -> dict[str, Any]:
    params = {"base_url": base_url, "api_key": KEY, "model": "demo", "prompts": PROMPTS,
              "dtype": "float32", "_ansible_check_mode": True, **args}
    with patch_module_args(params), pytest.raises(SystemExit):
        fingerprint.main()
    return json.loads(capsys.readouterr().out)


def test_without_a_reference_it_records_then_a_baseline_passes(endpoint, capsys):
    first = run(capsys, endpoint)
    assert first["ok"] and first["verdicts"] == {} and not first.get("failed")
    fp = first["fingerprint"]
    assert len(fp["scored"]) == len(PROMPTS)
    assert all(s["ref_ids"] == [3, 3] and s["greedy_ids"] == [3, 3] for s in fp["scored"])
    chats = [b for p, b in _Handler.seen if p == "/v1/chat/completions"]
    assert len(chats) == sum(p["kind"] == "chat" for p in PROMPTS)
    assert all(b["temperature"] == 0.0 and b["return_token_ids"] for b in chats)
    forced = [b for p, b in _Handler.seen if p == "/v1/completions" and b["max_tokens"] == 1]
    assert forced and all(b["prompt_logprobs"] == 2 for b in forced)
    again = run(capsys, endpoint, baseline=fp)
    assert again["ok"] and again["verdicts"]["baseline"]["max_abs"] == 0.0


def test_a_shifted_endpoint_fails_the_baseline(endpoint, capsys):
    fp = run(capsys, endpoint)["fingerprint"]
    _Handler.shift = 0.01
    result = run(capsys, endpoint, baseline=fp)
    assert result["failed"] and not result["ok"]
    verdict = result["verdicts"]["baseline"]
    assert verdict["max_abs"] == pytest.approx(0.01)
    assert "FAILED" in result["msg"] and "max |delta logprob|" in result["msg"]
    tolerances = {"float32": {"max_abs": 0.1, "mean_abs": 0.1}}
    loose = run(capsys, endpoint, baseline=fp, tolerances=tolerances)
    assert loose["ok"]


def test_refused_reference_and_unknown_dtype_fail_with_the_reason(endpoint, capsys, tmp_path):
    result = run(capsys, endpoint, dtype="fp8")
    assert result["failed"] and "no tolerance" in result["msg"]
    result = run(capsys, endpoint, reference_model_path=str(tmp_path))
    assert result["failed"] and "no *.safetensors" in result["msg"]
