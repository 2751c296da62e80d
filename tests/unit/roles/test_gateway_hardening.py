"""Role gateway: the real HAProxy with the role's haproxy.cfg closes the gateway's own holes.

The gateway and its stand-in node are tests/unit/gateway_harness.py's (the role's templates
rendered by ansible-playbook, run by the distribution's HAProxy on loopback, with an RSA
certificate as the role generates).

Checked: TLS 1.2 offers only the forward-secret AEAD suites of Mozilla's intermediate
configuration (no static RSA key exchange, no CBC), TLS 1.3 works, TLS 1.1 does not; a path is
normalized before the path rule reads it (/v1/../metrics is /metrics: 404, never forwarded);
the node's X-Forwarded-For is the client's address as the gateway saw it, never the client's
own header; a client address past gateway_auth_fail_limit failed authentications gets 429 for
every request, a valid key included, while other addresses are served.
"""

from __future__ import annotations

import socket
import ssl

import pytest
from gateway_harness import (
    AUTH_FAIL_LIMIT,
    NO_HAPROXY,
    TIMEOUT,
    Gateway,
    Node,
    openai_error,
    request,
)

pytestmark = NO_HAPROXY

# Mozilla's intermediate configuration, guidelines 5.7, the suites an RSA certificate can use
# (https://ssl-config.mozilla.org/guidelines/5.7.json). Its DHE-RSA suites need DH parameters
# in the certificate file, which neither the role's certificate nor this one has: ECDHE only.
MOZILLA_RSA_TLS12 = {
    "ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-RSA-CHACHA20-POLY1305",
}


# --- TLS ---------------------------------------------------------------------------------------


def handshake(gw: Gateway, version: ssl.TLSVersion, ciphers: str | None = None) -> str | None:
    """The suite the gateway agreed to for a client offering only ``ciphers`` at ``version``, or
    None when it refused the handshake."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.minimum_version = context.maximum_version = version
    if ciphers is not None:
        context.set_ciphers(ciphers + ":@SECLEVEL=0")  # the client offers what the test says
    with socket.create_connection(("127.0.0.1", gw.port), timeout=TIMEOUT) as plain:
        try:
            with context.wrap_socket(plain) as tls:
                return tls.cipher()[0]
        except (ssl.SSLError, ConnectionResetError):
            return None


def tls12_client_suites() -> list[dict]:
    """Every TLS 1.2 suite this machine's OpenSSL can offer (name, kea, aead, ...)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.set_ciphers("ALL:@SECLEVEL=0")
    return [c for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"]


def test_tls12_accepts_only_forward_secret_aead_suites(gateway: Gateway) -> None:
    suites = tls12_client_suites()
    assert len(suites) > 30  # static RSA, CBC, PSK, ...: the client offers them all
    accepted = {c["name"]: c for c in suites
                if handshake(gateway, ssl.TLSVersion.TLSv1_2, c["name"]) == c["name"]}
    assert set(accepted) == MOZILLA_RSA_TLS12
    for name, suite in accepted.items():
        assert suite["aead"] and suite["kea"] in ("kx-ecdhe", "kx-dhe"), name


@pytest.mark.parametrize("suite", [
    "AES128-GCM-SHA256", "AES256-GCM-SHA384",  # static RSA key exchange
    "AES128-SHA", "AES256-SHA256",  # static RSA, CBC
    "ECDHE-RSA-AES128-SHA", "ECDHE-RSA-AES256-SHA384", "ECDHE-RSA-AES128-SHA256",  # CBC
])
def test_static_rsa_and_cbc_suites_are_refused(gateway: Gateway, suite: str) -> None:
    assert handshake(gateway, ssl.TLSVersion.TLSv1_2, suite) is None


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated")
def test_tls13_is_served_and_tls11_is_not(gateway: Gateway) -> None:
    assert handshake(gateway, ssl.TLSVersion.TLSv1_3) in (
        "TLS_AES_256_GCM_SHA384", "TLS_AES_128_GCM_SHA256", "TLS_CHACHA20_POLY1305_SHA256")
    assert handshake(gateway, ssl.TLSVersion.TLSv1_1, "ALL") is None


# --- paths: normalized before the path rule ----------------------------------------------------


@pytest.mark.parametrize("path", [
    "/v1/../metrics", "/v1/%2e%2e/health", "/v1/%2E./version", "/v1/./../../health",
    "/v1//../metrics",
])
def test_a_path_that_leaves_v1_gets_404_and_never_reaches_the_node(
        gateway: Gateway, gateway_node: Node, path: str) -> None:
    before = gateway_node.paths()
    status, _headers, body = request(gateway, "GET", path, "other")
    assert status == 404 and openai_error(body)["type"] == "not_found"
    assert gateway_node.paths() == before  # nothing forwarded


@pytest.mark.parametrize(("sent", "forwarded"), [
    ("/v1//models?case=slashes", "/v1/models?case=slashes"),
    ("/v1/./models?case=dot", "/v1/models?case=dot"),
    ("/v1/x/../models?case=dotdot", "/v1/models?case=dotdot"),
    ("/%76%31/%6Dodels?case=encoded", "/v1/models?case=encoded"),
])
def test_the_node_gets_the_normalized_path(gateway: Gateway, gateway_node: Node, sent: str,
                                           forwarded: str) -> None:
    assert request(gateway, "GET", sent, "other")[0] == 200
    assert [s.path for s in gateway_node.requests(forwarded)] == [forwarded]


def test_a_malformed_percent_sequence_gets_400(gateway: Gateway, gateway_node: Node) -> None:
    assert request(gateway, "GET", "/v1/models%zz?case=malformed", "other")[0] == 400
    assert not [p for p in gateway_node.paths() if "case=malformed" in p]


# --- X-Forwarded-For: the gateway's, not the client's -----------------------------------------


@pytest.mark.parametrize("source", ["127.0.0.1", "127.0.0.5"])
def test_the_node_sees_the_client_address_the_gateway_saw(gateway: Gateway, gateway_node: Node,
                                                          source: str) -> None:
    path = f"/v1/models?case=xff-{source}"
    spoofed = {"X-Forwarded-For": "203.0.113.9", "Forwarded": "for=203.0.113.9",
               "X-Real-IP": "203.0.113.9"}
    assert request(gateway, "GET", path, "other", headers=spoofed, source=source)[0] == 200
    [seen] = gateway_node.requests(path)
    assert seen.forwarded_for == [source]


# --- failed authentications per client address -----------------------------------------------


def test_an_address_past_the_failed_auth_limit_gets_429_before_its_key_is_checked(
        gateway: Gateway, gateway_node: Node) -> None:
    source = "127.0.0.21"
    bad = {"Authorization": "Bearer not-a-key-of-this-gateway-0000"}
    failures = [request(gateway, "GET", "/v1/models", None, headers=bad if i % 2 else None,
                        source=source)[0] for i in range(AUTH_FAIL_LIMIT)]
    assert failures == [401] * AUTH_FAIL_LIMIT  # a missing and a wrong key both count
    path = "/v1/models?case=after-failures"
    status, headers, body = request(gateway, "GET", path, "other", source=source)
    assert status == 429 and headers["retry-after"] == "60"
    assert openai_error(body) == {"message": "too many failed authentication attempts",
                                  "type": "rate_limit"}
    assert gateway_node.requests(path) == []
    # another address with the same key is served
    assert request(gateway, "GET", path, "other", source="127.0.0.22")[0] == 200


def test_fewer_failures_than_the_limit_block_nothing(gateway: Gateway) -> None:
    source = "127.0.0.23"
    for _failure in range(AUTH_FAIL_LIMIT - 1):
        assert request(gateway, "GET", "/v1/models", None, source=source)[0] == 401
        assert request(gateway, "GET", "/v1/models", "other", source=source)[0] == 200
    assert request(gateway, "GET", "/v1/models", "other", source=source)[0] == 200
