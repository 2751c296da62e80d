"""The modules that call a vLLM node over mutual TLS, against a real local HTTPS server that
requires a client certificate of its CA (tls_pki.py): each transport - open_url
(vllm_endpoint_check, fingerprint), the OpenAI SDK (vllm_endpoint_check), urllib
(acceptance_check's serve) - gets through with ca_path, client_cert and client_key, and without
the client certificate (or with one of another CA, or without the CA) fails saying what to set."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args
from ansible_collections.instinct.vllm.plugins.module_utils import endpoint_check
from ansible_collections.instinct.vllm.plugins.module_utils._acceptance import serve
from ansible_collections.instinct.vllm.plugins.module_utils._acceptance.unit import UnitState
from ansible_collections.instinct.vllm.plugins.module_utils._fingerprint.consensus import (
    unit_claims,
)
from ansible_collections.instinct.vllm.plugins.module_utils._tls_client import (
    TlsClient,
    TlsConfigError,
    tls_reason,
)
from ansible_collections.instinct.vllm.plugins.modules import (
    acceptance_check,
    fingerprint,
    vllm_endpoint_check,
)
from fingerprint_endpoint import KEY as FP_KEY
from fingerprint_endpoint import stand_in
from tls_pki import Pki, make_pki, mtls_node

ROOT = Path(__file__).resolve().parents[4]
PROMPTS = yaml.safe_load((ROOT / "files" / "fingerprint" / "prompts.yml").read_text())["prompts"]
KEY = "k" * 32
NEEDS_CERT = "requires a client certificate (set client_cert and client_key)"


class Node(BaseHTTPRequestHandler):
    """/health, /v1/models and /v1/completions as vLLM answers them (no key asked)."""

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send({})
        else:
            self._send({"object": "list", "data": [
                {"id": "demo", "object": "model", "created": 0, "owned_by": "vllm"}]})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self._send({"choices": [{"index": 0, "text": " Paris", "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}})

    def _send(self, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def node(pki: Pki) -> Iterator[str]:
    """The URL of a node that serves only mutual TLS."""
    with mtls_node(pki, Node) as url:
        yield url


def mutual(pki: Pki) -> TlsClient:
    return TlsClient(str(pki.ca), str(pki.client_cert), str(pki.client_key))


def options(pki: Pki) -> dict[str, str]:
    return {"ca_path": str(pki.ca), "client_cert": str(pki.client_cert),
            "client_key": str(pki.client_key)}


def test_options_from_params_take_empty_as_unset() -> None:
    assert TlsClient.from_params({"ca_path": "", "client_cert": None}) == TlsClient()
    tls = TlsClient.from_params({"ca_path": "/ca", "client_cert": "/c", "client_key": "/k"})
    assert tls.open_url_kwargs() == {"ca_path": "/ca", "client_cert": "/c", "client_key": "/k"}


def test_a_file_that_does_not_load_is_named(pki: Pki, tmp_path: Path) -> None:
    with pytest.raises(TlsConfigError, match=r"ca_path .*missing.crt"):
        TlsClient(str(tmp_path / "missing.crt")).ssl_context()
    with pytest.raises(TlsConfigError, match=r"client_cert .*controller.crt / client_key .*ca.key"):
        TlsClient(None, str(pki.client_cert), str(pki.ca.with_suffix(".key"))).ssl_context()


def test_other_errors_are_not_called_tls() -> None:
    assert tls_reason(ConnectionRefusedError(111, "Connection refused")) == ""


@pytest.mark.parametrize("check", ["health", "models"], ids=["open_url", "openai_sdk"])
def test_endpoint_check_over_mutual_tls(pki: Pki, node: str, check: str) -> None:
    def run(tls: TlsClient) -> endpoint_check.CheckResult:
        return endpoint_check.run_checks(endpoint_check.Endpoint(node, KEY, tls=tls, timeout=10),
                                         [check])[0]

    assert run(mutual(pki)).ok
    without = run(TlsClient(str(pki.ca)))
    assert not without.ok and NEEDS_CERT in without.detail
    stranger = run(TlsClient(str(pki.ca), str(pki.stranger_cert), str(pki.stranger_key)))
    assert not stranger.ok and "TLS: the server" in stranger.detail
    untrusted = run(TlsClient(None, str(pki.client_cert), str(pki.client_key)))
    assert not untrusted.ok and "set ca_path to the CA that signed it" in untrusted.detail


def test_acceptance_serve_over_mutual_tls(pki: Pki, node: str) -> None:
    def spec(tls: TlsClient) -> serve.ServeSpec:
        return serve.ServeSpec("vllm", node, sys.executable, timeout=10, tls=tls)

    ok, reason, detail = serve.complete(node, KEY, "", spec(mutual(pki)))
    assert ok and detail["completion_tokens"] == 2, reason
    ok, reason, _detail = serve.complete(node, KEY, "", spec(TlsClient(str(pki.ca))))
    assert not ok and NEEDS_CERT in reason
    assert serve.request(node.replace("https", "http") + "/health", "", None, 5)[0] == 0


class Running:
    """A process that keeps running (what _wait_ready polls)."""

    def poll(self) -> None:
        return None


def test_a_temporary_server_refusing_the_client_is_not_waited_for(pki: Pki, node: str) -> None:
    assert serve._wait_ready(Running(), node, 30, mutual(pki)) == ""  # type: ignore[arg-type]
    why = serve._wait_ready(Running(), node, 30, TlsClient(str(pki.ca)))  # type: ignore[arg-type]
    assert NEEDS_CERT in why


def test_a_temporary_server_with_a_certificate_is_asked_over_https() -> None:
    assert serve.server_scheme(["--ssl-certfile", "/c.crt", "--ssl-cert-reqs", "2"]) == "https"
    assert serve.server_scheme(["--ssl-certfile=/c.crt"]) == "https"
    assert serve.server_scheme(["--dtype", "float32"]) == "http"


def run_module(capsys: pytest.CaptureFixture[str], main: Any, params: dict[str, Any]
               ) -> dict[str, Any]:
    with patch_module_args(params), pytest.raises(SystemExit):
        main()
    return json.loads(capsys.readouterr().out)


def test_vllm_endpoint_check_module(pki: Pki, node: str, capsys: pytest.CaptureFixture) -> None:
    base = {"base_url": node, "api_key": KEY, "checks": ["health", "models"], "timeout": 10}
    out = run_module(capsys, vllm_endpoint_check.main, {**base, **options(pki)})
    assert not out.get("failed") and out["model"] == "demo", out["msg"]
    out = run_module(capsys, vllm_endpoint_check.main, {**base, "ca_path": str(pki.ca)})
    assert out["failed"] and NEEDS_CERT in out["msg"]
    out = run_module(capsys, vllm_endpoint_check.main,
                     {**base, "ca_path": str(pki.ca), "client_cert": str(pki.client_cert)})
    assert out["failed"] and "required together: client_cert, client_key" in out["msg"]


def test_fingerprint_module(pki: Pki, capsys: pytest.CaptureFixture) -> None:
    with stand_in(pki=pki) as (url, _handler):
        base = {"base_url": url, "api_key": FP_KEY, "model": "demo", "prompts": PROMPTS,
                "dtype": "float32", "_ansible_check_mode": True}
        out = run_module(capsys, fingerprint.main, {**base, **options(pki)})
        assert out["ok"] and not out.get("failed"), out["msg"]
        out = run_module(capsys, fingerprint.main, {**base, "ca_path": str(pki.ca)})
        assert out["failed"] and "GET /v1/models: TLS: " in out["msg"] and NEEDS_CERT in out["msg"]


def test_acceptance_check_module(pki: Pki, node: str, capsys: pytest.CaptureFixture,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serve, "read_unit", lambda run, name: UnitState(
        "loaded", "active", "running", "success"))
    base = {"check": "serve", "device": "cpu", "python": sys.executable, "service": "vllm",
            "base_url": node, "api_key": KEY, "timeout": 10}
    result = run_module(capsys, acceptance_check.main, {**base, **options(pki)})["result"]
    assert result["status"] == "ok", result["reason"]
    result = run_module(capsys, acceptance_check.main, {**base, "ca_path": str(pki.ca)})["result"]
    assert result["status"] == "failed" and NEEDS_CERT in result["reason"]


def test_a_units_url_is_https_when_it_has_a_certificate() -> None:
    unit = ("ExecStart=/opt/vllm/venv/bin/vllm serve /srv/models/demo --port 8001 "
            "--ssl-certfile /etc/vllm/tls/node.crt --ssl-keyfile /etc/vllm/tls/node.key "
            "--ssl-ca-certs /etc/vllm/tls/ca.crt --ssl-cert-reqs 2 --dtype float32\n")
    claims = unit_claims(unit, None, packages=False)
    assert claims.url == "https://127.0.0.1:8001"
    assert claims.flags == {"dtype": "float32"}
    plain = unit_claims(unit.split(" --ssl-certfile", maxsplit=1)[0] + "\n", None, packages=False)
    assert plain.url == "http://127.0.0.1:8001"
