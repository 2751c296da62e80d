"""A throw-away PKI for TLS tests: a CA, certificates it signs (ECDSA P-256, PEM files, as the
fleet's); ``make_pki``, the set the module tests use; and ``serve_mtls``, which makes a local HTTP
server answer only clients that present a certificate of the CA."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAY = datetime.timedelta(days=1)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path, password: bytes | None = None) -> None:
    encryption: serialization.KeySerializationEncryption = serialization.NoEncryption()
    if password is not None:
        encryption = serialization.BestAvailableEncryption(password)
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    )
    path.chmod(0o600)


class Ca:
    """A self-signed CA in ``directory``: ``<name>.crt`` / ``<name>.key``."""

    def __init__(self, directory: Path, name: str = "ca") -> None:
        self.directory = directory
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.name = _name(f"test {name}")
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, content_commitment=False, key_encipherment=False,
                    data_encipherment=False, key_agreement=False, key_cert_sign=True,
                    crl_sign=True, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )
        self.path = directory / f"{name}.crt"
        self.path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        name: str,
        dns: tuple[str, ...] = ("localhost",),
        ips: tuple[str, ...] = ("127.0.0.1", "::1"),
        password: bytes | None = None,
    ) -> tuple[Path, Path]:
        """A certificate for ``name`` (serverAuth + clientAuth, like a node's): (crt, key)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + _DAY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        crt, key_path = self.directory / f"{name}.crt", self.directory / f"{name}.key"
        crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, key_path, password)
        return crt, key_path


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path  # a client certificate of another CA
    stranger_key: Path


def make_pki(tmp: Path) -> Pki:
    """A CA, a node certificate for 127.0.0.1 and localhost, the controller's client certificate
    and a client certificate of another CA."""
    ca = Ca(tmp, "ca")
    server = ca.issue("node", dns=("localhost",), ips=("127.0.0.1",))
    client = ca.issue("controller", dns=(), ips=())
    stranger = Ca(tmp, "other-ca").issue("stranger", dns=(), ips=())
    return Pki(ca.path, *server, *client, *stranger)


def mtls_server_context(ca: Path, cert: Path, key: Path) -> ssl.SSLContext:
    """A server's TLS settings as vLLM's with --ssl-certfile/--ssl-keyfile/--ssl-ca-certs and
    --ssl-cert-reqs 2: its certificate, and a client certificate of ``ca`` required."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.load_verify_locations(ca)
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def serve_mtls(httpd: HTTPServer, pki: Pki) -> None:
    """Make ``httpd`` (not yet serving) speak TLS with the node's certificate and require a client
    certificate signed by the CA, as a node's vLLM does (--ssl-cert-reqs 2). The handshake runs
    in the request's thread, so a refused client does not hold up the others."""
    ctx = mtls_server_context(pki.ca, pki.server_cert, pki.server_key)
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
    handle = httpd.finish_request

    def finish_request(request, client_address):  # type: ignore[no-untyped-def]
        try:
            request.do_handshake()
        except (ssl.SSLError, OSError):
            return
        handle(request, client_address)

    httpd.finish_request = finish_request  # type: ignore[method-assign]


@contextlib.contextmanager
def mtls_node(pki: Pki, handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """The URL of a local node that serves ``handler`` over mutual TLS only (serve_mtls)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    serve_mtls(httpd, pki)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
