"""The module instinct.vllm.acceptance_check, serve path: a fake `systemctl` first on PATH (it
answers `show` with the states a test lists, one per call) and a fake vLLM endpoint on
127.0.0.1 (http.server). The temporary server is replaced by a recorder: these tests are about
when it is asked for, test_acceptance.py starts one for real."""

from __future__ import annotations

import json
import os
import pwd
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.instinct.vllm.plugins.module_utils._acceptance import serve
from ansible_collections.instinct.vllm.plugins.modules import acceptance_check

KEY = "module-test-key-7c21"
ACTIVATING = "loaded activating start success"
ACTIVE = "loaded active running success"

FAKE_SYSTEMCTL = """#!{python}
# systemctl for the tests: `show` answers the next line of ./states (LoadState ActiveState
# SubState Result; the last line again once all were used) and logs its argv to ./calls.
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
calls = here / "calls"
done = len(calls.read_text().splitlines()) if calls.exists() else 0
with calls.open("a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
states = (here / "states").read_text().splitlines()
load, active, sub, result = states[min(done, len(states) - 1)].split()
print(f"LoadState={{load}}\\nActiveState={{active}}\\nSubState={{sub}}\\nResult={{result}}")
"""


class Systemctl:
    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir

    def states(self, *lines: str) -> None:
        (self.bin_dir / "states").write_text("\n".join(lines) + "\n")

    @property
    def calls(self) -> list[str]:
        log = self.bin_dir / "calls"
        return log.read_text().splitlines() if log.exists() else []


@pytest.fixture
def systemctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Systemctl:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "systemctl"
    script.write_text(FAKE_SYSTEMCTL.format(python=sys.executable))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return Systemctl(bin_dir)


class FakeVllm(BaseHTTPRequestHandler):
    """/v1/models and /v1/completions as vLLM answers them, behind the key."""

    requests: list[str] = []

    def _answer(self, body: dict) -> None:
        FakeVllm.requests.append(f"{self.command} {self.path}")
        ok = self.headers.get("Authorization") == f"Bearer {KEY}"
        data = json.dumps(body if ok else {"error": "Unauthorized"}).encode()
        self.send_response(200 if ok else 401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._answer({"object": "list", "data": [{"id": "demo", "object": "model"}]})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        choice = {"index": 0, "text": " Paris", "finish_reason": "length"}
        self._answer({"choices": [choice], "usage": {"completion_tokens": 8}})

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[str]:
    FakeVllm.requests = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeVllm)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def temporary(monkeypatch: pytest.MonkeyPatch) -> list[serve.ServeSpec]:
    """The temporary server, replaced: each call is recorded and answers ok."""
    asked: list[serve.ServeSpec] = []

    def record(spec: serve.ServeSpec) -> tuple[bool, str, dict]:
        asked.append(spec)
        return True, "8 tokens from the temporary server", {"completion_tokens": 8}

    monkeypatch.setattr(serve, "temporary_server", record)
    return asked


def run_serve(capsys: pytest.CaptureFixture[str], base_url: str, **args: object) -> dict:
    params = {
        "check": "serve",
        "device": "cpu",
        "python": sys.executable,
        "service": "vllm",
        "base_url": base_url,
        "api_key": KEY,
        "model_path": "/srv/models/demo",
        "poll_interval": 0.05,
        **args,
    }
    with patch_module_args(params), pytest.raises(SystemExit):
        acceptance_check.main()
    return json.loads(capsys.readouterr().out)["result"]


def test_an_activating_service_is_waited_for_then_used(systemctl, endpoint, temporary, capsys):
    systemctl.states(ACTIVATING, ACTIVATING, ACTIVATING, ACTIVE)
    result = run_serve(capsys, endpoint, activating_timeout=30)
    assert result["status"] == "ok", result
    assert result["detail"]["mode"] == "service" and result["detail"]["service"] == "active"
    assert result["detail"]["completion_tokens"] == 8
    asked = "show --property=LoadState,ActiveState,SubState,Result vllm.service"
    assert systemctl.calls == [asked] * 4
    assert FakeVllm.requests == ["GET /v1/models", "POST /v1/completions"]
    assert temporary == []  # no second vLLM on the GPUs the service was filling
    assert KEY not in json.dumps(result)
    assert result["detail"]["user"] == pwd.getpwuid(os.geteuid()).pw_name  # who ran the check


def test_a_service_activating_past_the_bound_fails_naming_the_variable(
    systemctl, endpoint, temporary, capsys
):
    systemctl.states(ACTIVATING)
    result = run_serve(capsys, endpoint, activating_timeout=0.5)
    assert result["status"] == "failed"
    assert result["reason"] == (
        "vllm.service is still activating (start) after 0.5 s "
        "(acceptance_activating_timeout; journalctl -u vllm says why)"
    )
    assert result["detail"]["waited_seconds"] >= 0.5
    assert len(systemctl.calls) >= 2  # the first look, then at least the last one at the bound
    assert FakeVllm.requests == [] and temporary == []


def test_no_unit_asks_for_a_temporary_server(systemctl, endpoint, temporary, capsys):
    systemctl.states("not-found inactive dead success")
    result = run_serve(capsys, endpoint, service="vllm-gptoss")
    assert result["status"] == "ok", result
    assert result["detail"]["mode"] == "temporary"
    assert result["detail"]["why"] == "no unit vllm-gptoss.service on the node"
    assert systemctl.calls == [
        "show --property=LoadState,ActiveState,SubState,Result vllm-gptoss.service"
    ]
    assert [spec.model_path for spec in temporary] == ["/srv/models/demo"]
    assert FakeVllm.requests == []


def test_a_failed_unit_fails_without_a_temporary_server(systemctl, endpoint, temporary, capsys):
    systemctl.states("loaded failed failed start-limit-hit")
    result = run_serve(capsys, endpoint)
    assert result["status"] == "failed"
    assert result["reason"] == (
        "vllm.service failed (result start-limit-hit; journalctl -u vllm says why)"
    )
    assert temporary == [] and FakeVllm.requests == []


def test_without_systemctl_the_check_errors_instead_of_guessing(
    tmp_path, monkeypatch, endpoint, temporary, capsys
):
    monkeypatch.setenv("PATH", str(tmp_path))  # no systemctl on it
    result = run_serve(capsys, endpoint)
    assert result["status"] == "error"
    assert result["reason"].startswith("systemctl show vllm.service exited 127: systemctl: ")
    assert temporary == []


@pytest.mark.parametrize(("params", "missing"), [
    ({"check": "firmware"}, "python"),
    ({"check": "serve", "python": "/x/bin/python"}, "service, base_url"),
    ({"check": "vllm_platform", "python": "/x/bin/python"}, "service"),
])
def test_the_service_facts_are_arguments_not_defaults(capsys, params, missing) -> None:
    """The interpreter, the unit and the URL are role vllm_service's published facts, which role
    acceptance passes: the module restates none of them as a default."""
    with patch_module_args({"device": "cpu", **params}), pytest.raises(SystemExit):
        acceptance_check.main()
    out = json.loads(capsys.readouterr().out)
    assert out["failed"], out
    assert out["msg"].endswith(f"missing: {missing}") or out["msg"] == (
        f"missing required arguments: {missing}"), out["msg"]
