"""The watchdog wrapper talks TLS with a client certificate to a vLLM that serves TLS.

Options derived from vLLM's --ssl-* flags, their overrides and errors; then HTTP calls against
a real local TLS server that requires a client certificate, as vLLM does with
`--ssl-cert-reqs 2` (ssl.CERT_REQUIRED).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from script_loader import load_script
from tls_pki import Ca, mtls_server_context

ROOT = Path(__file__).resolve().parents[3]
WRAPPER = ROOT / "roles" / "vllm_service" / "files" / "instinct-vllm-watchdog"
wd: ModuleType = load_script("instinct_vllm_watchdog", WRAPPER, reuse=True)
MODEL = "m"


@dataclasses.dataclass(frozen=True)
class Pki:
    ca: Path
    node: tuple[Path, Path]  # the node's own certificate: vLLM's and the watchdog's
    other_ca: Path  # a CA that signed neither
    stranger: tuple[Path, Path]  # signed by other_ca
    elsewhere: tuple[Path, Path]  # signed by ca, for another host (no 127.0.0.1, no localhost)
    encrypted: tuple[Path, Path]  # signed by ca, key under a passphrase


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca, other = Ca(directory, "ca"), Ca(directory, "other-ca")
    return Pki(
        ca=ca.path,
        node=ca.issue("node"),
        other_ca=other.path,
        stranger=other.issue("stranger"),
        elsewhere=ca.issue("elsewhere", dns=("node-b.example",), ips=("192.0.2.7",)),
        encrypted=ca.issue("locked", password=b"secret"),
    )


def vllm_argv(pki: Pki, port: int = 8443) -> list[str]:
    """vLLM's command line as role vllm_service renders it with mTLS on."""
    crt, key = pki.node
    return [
        "/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m",
        "--served-model-name", MODEL, "--port", str(port), "--ssl-ca-certs", str(pki.ca),
        "--ssl-cert-reqs", "2", "--ssl-certfile", str(crt), "--ssl-keyfile", str(key),
    ]  # fmt: skip


# ------------------------------------------------------------------------------------------
# Options


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["vllm", "serve", "/m", "--ssl-certfile", "/c.crt", "--port", "8443"],
         "https://127.0.0.1:8443"),
        (["api_server", "--ssl_certfile=/c.crt", "--host", "::1"], "https://[::1]:8000"),
        (["api_server", "--ssl-keyfile", "/k.key", "--port", "81"], "http://127.0.0.1:81"),
    ],
)  # fmt: skip
def test_derive_target_is_https_when_vllm_has_a_certificate(argv: list[str], expected: str) -> None:
    assert wd.derive_target(argv)[0] == expected


def test_parse_cli_takes_the_tls_files_from_vllm(pki: Pki) -> None:
    cfg, child = wd.parse_cli(["--", *vllm_argv(pki)], {})
    assert child == vllm_argv(pki)
    assert cfg.base_url == "https://127.0.0.1:8443"
    assert cfg.health == "https://127.0.0.1:8443/health"
    assert (cfg.tls_ca, cfg.tls_cert, cfg.tls_key) == (str(pki.ca), *map(str, pki.node))
    context = cfg.tls_context
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "test ca"),),)]


def test_parse_cli_tls_options_override_vllm_argv_over_environment(pki: Pki) -> None:
    crt, key = pki.stranger
    env = {"INSTINCT_WATCHDOG_TLS_CA": str(pki.other_ca), "INSTINCT_WATCHDOG_TLS_CERT": "/x"}
    cfg, _child = wd.parse_cli(
        ["--tls-cert", str(crt), "--tls-key", str(key), "--", *vllm_argv(pki)], env
    )
    assert (cfg.tls_ca, cfg.tls_cert, cfg.tls_key) == (str(pki.other_ca), str(crt), str(key))
    cfg, _child = wd.parse_cli(["--tls-cert", "", "--", *vllm_argv(pki)], {})
    assert (cfg.tls_cert, cfg.tls_key) == ("", "")  # no client certificate
    crt, key = pki.node
    combined = crt.with_name("combined.pem")
    combined.write_bytes(crt.read_bytes() + key.read_bytes())
    cfg, _child = wd.parse_cli(["--tls-cert", str(combined), "--", *vllm_argv(pki)], {})
    assert (cfg.tls_cert, cfg.tls_key) == (str(combined), "")  # the key in the certificate file


def test_plain_http_when_vllm_serves_no_tls() -> None:
    cfg, _child = wd.parse_cli(["--", "vllm", "serve", "/m", "--ssl-ca-certs", "/nowhere"], {})
    assert cfg.base_url == "http://127.0.0.1:8000"
    assert cfg.tls_context is None and (cfg.tls_ca, cfg.tls_cert, cfg.tls_key) == ("", "", "")
    env = {"INSTINCT_WATCHDOG_TLS_CERT": ""}  # empty: no file, nothing to refuse
    assert wd.parse_cli(["--tls-key", "", "--", "v", "--model", "m"], env)[0].tls_context is None


def test_an_https_base_url_alone_trusts_the_system_store() -> None:
    cfg, _child = wd.parse_cli(["--base-url", "https://node-a:8000", "--", "v", "--model", "m"], {})
    assert cfg.tls_context is not None and cfg.tls_cert == ""
    assert cfg.tls_context.verify_mode == ssl.CERT_REQUIRED


def _swap(argv: list[str], flag: str, value: str) -> list[str]:
    return [*argv[: argv.index(flag) + 1], value, *argv[argv.index(flag) + 2 :]]


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("vllm-ca-missing", r"--tls-ca \(vLLM's --ssl-ca-certs\): cannot read /nowhere/ca.crt"),
        ("vllm-key-missing", r"--tls-key \(vLLM's --ssl-keyfile\): cannot read /nowhere/n.key"),
        ("option-cert-missing", r"^--tls-cert: cannot read /nowhere/c.crt: No such file"),
        ("ca-not-pem", r"^--tls-ca: .*: no PEM CA certificate"),
        ("key-mismatch", r"--tls-cert .*node.crt / --tls-key .*stranger.key: not a PEM cert"),
        ("key-encrypted", r"--tls-cert \(vLLM's --ssl-certfile\) .*locked.crt .*key is encrypted"),
        ("key-without-cert", r"^--tls-key given without a certificate"),
        ("tls-with-http", r"^--tls-ca given, but vLLM is reached over plain http"),
    ],
)  # fmt: skip
def test_parse_cli_tls_errors_name_the_option(pki: Pki, case: str, message: str) -> None:
    argv = vllm_argv(pki)
    own: list[str] = []
    env: dict[str, str] = {}
    if case == "vllm-ca-missing":
        argv = _swap(argv, "--ssl-ca-certs", "/nowhere/ca.crt")
    elif case == "vllm-key-missing":
        argv = _swap(argv, "--ssl-keyfile", "/nowhere/n.key")
    elif case == "option-cert-missing":
        own = ["--tls-cert", "/nowhere/c.crt"]
    elif case == "ca-not-pem":
        env = {"INSTINCT_WATCHDOG_TLS_CA": str(pki.node[1])}  # a key, no certificate
    elif case == "key-mismatch":
        own = ["--tls-cert", str(pki.node[0]), "--tls-key", str(pki.stranger[1])]
    elif case == "key-encrypted":
        argv = _swap(_swap(argv, "--ssl-certfile", str(pki.encrypted[0])),
                     "--ssl-keyfile", str(pki.encrypted[1]))  # fmt: skip
    elif case == "key-without-cert":
        own = ["--tls-cert", "", "--tls-key", str(pki.node[1])]
    elif case == "tls-with-http":
        own, argv = ["--tls-ca", str(pki.ca)], ["vllm", "serve", "/m"]
    with pytest.raises(ValueError, match=message):
        wd.parse_cli([*own, "--", *argv], env)


def test_main_reports_a_tls_error_and_exits_2(pki: Pki, capsys: pytest.CaptureFixture[str]) -> None:
    argv = _swap(vllm_argv(pki), "--ssl-certfile", "/nowhere/n.crt")
    assert wd.main(["--", *argv], {}) == 2
    message = "--tls-cert (vLLM's --ssl-certfile): cannot read /nowhere/n.crt"
    assert message in capsys.readouterr().err


# ------------------------------------------------------------------------------------------
# Against a TLS server that requires a client certificate (vLLM with --ssl-cert-reqs 2)


@dataclasses.dataclass
class Seen:
    """Requests the server answered: (method, path, client certificate CN)."""

    requests: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)


def _handler(seen: Seen) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return

        def _answer(self, method: str) -> None:
            peer = self.connection.getpeercert() or {}  # type: ignore[attr-defined]
            cn = dict(item[0] for item in peer.get("subject", ())).get("commonName", "")
            with seen.lock:
                seen.requests.append((method, self.path, cn))
            body = {
                "/health": b"",
                "/metrics": b"vllm:num_requests_running 0\nvllm:generation_tokens_total 1\n",
                "/v1/models": json.dumps({"data": [{"id": MODEL}]}).encode(),
                "/v1/completions": b'{"choices": [{"text": "!"}]}',
            }[self.path]
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._answer("GET")

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._answer("POST")

    return Handler


#: How a refused client certificate shows: vLLM's alert (certificate required, unknown CA), or
#: the connection closed before the client read it (TLS 1.3 sends the request first).
REFUSED = r"CERTIFICATE_REQUIRED|HANDSHAKE_FAILURE|UNKNOWN_CA|SSLEOFError|Connection(Reset|Aborted)"


@contextlib.contextmanager
def tls_server(ca: Path, cert: tuple[Path, Path]) -> Iterator[tuple[int, Seen]]:
    """A server like vLLM with --ssl-certfile/--ssl-keyfile/--ssl-ca-certs/--ssl-cert-reqs 2."""
    context = mtls_server_context(ca, *cert)
    seen = Seen()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(seen))
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_the_watchdog_presents_the_node_certificate(pki: Pki) -> None:
    with tls_server(pki.ca, pki.node) as (port, seen):
        cfg, _child = wd.parse_cli(["--", *vllm_argv(pki, port)], {})
        code, _body, detail = wd.http_call(cfg.health, 5.0, context=cfg.tls_context)
    assert (code, detail) == (200, "HTTP 200")
    assert seen.requests == [("GET", "/health", "node")]


# (the server's certificate, the watchdog's CA and client certificate, what the failure says)
REFUSALS = {
    "without a client certificate vLLM refuses": ("node", "ca", None, REFUSED),
    "a client certificate of another CA is refused": ("node", "ca", "stranger", REFUSED),
    "with the wrong CA the watchdog refuses the server": (
        "node", "other_ca", "node", "CERTIFICATE_VERIFY_FAILED"),
    # a certificate of the right CA for another host (no 127.0.0.1)
    "the server name is checked": ("elsewhere", "ca", "node", "mismatch"),
}


@pytest.mark.parametrize("case", REFUSALS, ids=lambda c: c.replace(" ", "_"))
def test_a_refused_handshake_sends_no_request(pki: Pki, case: str) -> None:
    server_cert, ca, client, says = REFUSALS[case]
    with tls_server(pki.ca, getattr(pki, server_cert)) as (port, seen):
        client_files = map(str, getattr(pki, client)) if client else ("", "")
        context = wd.client_context(str(getattr(pki, ca)), *client_files)
        code, _body, detail = wd.http_call(f"https://127.0.0.1:{port}/health", 5.0, context=context)
    assert code is None and re.search(says, detail), detail
    assert seen.requests == []


def test_plain_http_to_a_tls_vllm_fails(pki: Pki) -> None:
    """Without --ssl-certfile in the vLLM argv the wrapper would speak plain HTTP: no answer."""
    with tls_server(pki.ca, pki.node) as (port, seen):
        code, _body, _detail = wd.http_call(f"http://127.0.0.1:{port}/health", 5.0)
    assert code is None and seen.requests == []


def test_every_call_of_the_poller_uses_tls(pki: Pki) -> None:
    """/health, /v1/models and the warm-up (loading), /metrics (serving) and the probe."""
    with tls_server(pki.ca, pki.node) as (port, seen):
        cfg, _child = wd.parse_cli(["--probe-interval", "30", "--", *vllm_argv(pki, port)], {})
        monitor = wd.Monitor(cfg, 0.0)
        poller = wd.Poller(monitor, threading.Lock(), "sk-key", lambda *a: None)
        assert poller._poll_once() == 0.0  # warmed up: /health again at once
        assert monitor.warmed, monitor.warmup_detail
        poller._poll_once()
        assert monitor.ready, (monitor.health_detail, monitor.models_detail)
        poller._poll_once()
        poller._probe_once()
    assert monitor.sample is not None and monitor.sample.running == 0.0
    assert monitor.probe_ok, monitor.probe_detail
    assert seen.requests == [
        ("GET", "/health", "node"),
        ("GET", "/v1/models", "node"),
        ("POST", "/v1/completions", "node"),
        ("GET", "/health", "node"),
        ("GET", "/v1/models", "node"),
        ("GET", "/health", "node"),
        ("GET", "/metrics", "node"),
        ("POST", "/v1/completions", "node"),
    ]
