"""A throw-away PKI for tests that talk mutual TLS: a CA, a server certificate for 127.0.0.1
and localhost, a client certificate signed by the CA and one signed by another CA, all made with
the openssl CLI (ECDSA P-256, as the fleet's); and `serve_mtls`, which makes a local HTTP server
answer only clients that present a certificate of the CA."""

from __future__ import annotations

import ssl
import subprocess
from dataclasses import dataclass
from http.server import HTTPServer
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path  # a client certificate of another CA
    stranger_key: Path


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)


def _ca(tmp: Path, name: str) -> tuple[Path, Path]:
    cert, key = tmp / f"{name}.crt", tmp / f"{name}.key"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", key, "-out", cert, "-days", "2", "-subj", f"/CN={name}",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    return cert, key


def _leaf(tmp: Path, name: str, ca: tuple[Path, Path], ext: str) -> tuple[Path, Path]:
    cert, key, csr, conf = (tmp / f"{name}{s}" for s in (".crt", ".key", ".csr", ".ext"))
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", key, "-out", csr, "-subj", f"/CN={name}")
    conf.write_text(ext)
    _openssl("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial",
             "-out", cert, "-days", "2", "-extfile", conf)
    return cert, key


def make_pki(tmp: Path) -> Pki:
    ca = _ca(tmp, "ca")
    server = _leaf(tmp, "node", ca, "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
                   "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    client_ext = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n"
    client = _leaf(tmp, "controller", ca, client_ext)
    stranger = _leaf(tmp, "stranger", _ca(tmp, "other-ca"), client_ext)
    return Pki(ca[0], *server, *client, *stranger)


def serve_mtls(httpd: HTTPServer, pki: Pki) -> None:
    """Make `httpd` (not yet serving) speak TLS with the node's certificate and require a client
    certificate signed by the CA, as a node's vLLM does (--ssl-cert-reqs 2). The handshake runs
    in the request's thread, so a refused client does not hold up the others."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki.server_cert, pki.server_key)
    ctx.load_verify_locations(pki.ca)
    ctx.verify_mode = ssl.CERT_REQUIRED
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
    handle = httpd.finish_request

    def finish_request(request, client_address):  # type: ignore[no-untyped-def]
        try:
            request.do_handshake()
        except (ssl.SSLError, OSError):
            return
        handle(request, client_address)

    httpd.finish_request = finish_request  # type: ignore[method-assign]
