"""Role gateway: the real HAProxy with the role's haproxy.cfg bounds what one key can do.

The gateway and its stand-in node are tests/unit/gateway_harness.py's (the role's templates
rendered by ansible-playbook, run by the distribution's HAProxy on loopback).

Checked: a body over gateway_max_body_bytes gets 413 (JSON) and never reaches the node, a body
at the limit does; a chunked body or a POST without Content-Length gets 411; a key limited to 2
requests in flight gets 429 for a third while another key still gets 200, and 200 again once the
two are done, also over keep-alive connections that stay open (idle ones count for nothing);
401, 404 and the request-rate 429 are unchanged.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import threading

import pytest
from gateway_harness import (
    KEYS,
    MAX_BODY,
    NO_HAPROXY,
    NODE_KEY,
    TIMEOUT,
    Gateway,
    Node,
    openai_error,
    post_head,
    raw_exchange,
    request,
    wait_for,
)

pytestmark = NO_HAPROXY


# --- request bodies ------------------------------------------------------------------------------


def test_the_default_limit_is_4_mib() -> None:
    assert MAX_BODY == 4 * 1024 * 1024


def test_a_body_over_the_limit_gets_413_and_never_reaches_a_node(gateway: Gateway,
                                                                 gateway_node: Node) -> None:
    path = "/v1/chat/completions?case=over"
    status, body = raw_exchange(gateway, post_head(path, "other",
                                                   f"Content-Length: {MAX_BODY + 1}"),
                                b"x" * (MAX_BODY + 1))
    assert status == 413
    error = openai_error(body)
    assert error["type"] == "invalid_request_error"
    assert str(MAX_BODY) in error["message"]
    assert path not in gateway_node.paths()


def test_a_large_announced_body_gets_413_before_it_is_sent(gateway: Gateway,
                                                           gateway_node: Node) -> None:
    # curl waits for "100 Continue" first: the 413 comes instead, no body byte is sent
    path = "/v1/completions?case=expect"
    status, body = raw_exchange(gateway, post_head(path, "other", "Content-Length: 1000000000",
                                                   "Expect: 100-continue"))
    assert status == 413 and openai_error(body)["type"] == "invalid_request_error"
    assert path not in gateway_node.paths()


def test_a_body_at_the_limit_reaches_the_node_whole(gateway: Gateway, gateway_node: Node) -> None:
    path = "/v1/chat/completions?case=at-limit"
    payload = os.urandom(MAX_BODY // 2).hex().encode()
    assert len(payload) == MAX_BODY
    status, _headers, body = request(gateway, "POST", path, "other", body=payload)
    assert status == 200 and json.loads(body)["received"] == MAX_BODY
    seen = gateway_node.requests(path)
    assert len(seen) == 1
    assert hashlib.sha256(seen[0].body).digest() == hashlib.sha256(payload).digest()
    assert seen[0].authorization == f"Bearer {NODE_KEY}"  # the client's key never reaches it


@pytest.mark.parametrize(
    ("case", "headers", "body"),
    [
        ("chunked", ["Transfer-Encoding: chunked"], b"5\r\nhello\r\n0\r\n\r\n"),
        # HAProxy drops Content-Length when Transfer-Encoding is there too (RFC 9112 6.3)
        ("chunked-and-length", ["Content-Length: 5", "Transfer-Encoding: chunked"],
         b"5\r\nhello\r\n0\r\n\r\n"),
        ("no-length", [], b""),
    ],
)
def test_a_body_without_content_length_gets_411(gateway: Gateway, gateway_node: Node, case: str,
                                                headers: list[str], body: bytes) -> None:
    path = f"/v1/completions?case={case}"
    status, answer = raw_exchange(gateway, post_head(path, "other", *headers), body)
    assert status == 411
    error = openai_error(answer)
    assert error["type"] == "invalid_request_error" and "Content-Length" in error["message"]
    assert path not in gateway_node.paths()


def test_requests_without_a_body_are_not_affected(gateway: Gateway) -> None:
    assert request(gateway, "GET", "/v1/models", "other")[0] == 200


# --- requests in flight per key ------------------------------------------------------------------


def test_the_concurrency_map_has_each_keys_limit_or_the_default(gateway: Gateway) -> None:
    entries = [line.split() for line in (gateway.dir / "concurrency-limits.map").read_text()
               .splitlines() if line and not line.startswith("#")]
    assert entries == [["limited", "2"], ["other", "64"], ["rated", "64"]]


class Held:
    """A /v1/hold request on its own thread (and its given connection), answered on release."""

    def __init__(self, gw: Gateway, conn: http.client.HTTPSConnection) -> None:
        self.result: tuple[int, dict[str, str], bytes] | None = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.result = request(gw, "GET", "/v1/hold", "limited", conn=conn)
            except BaseException as exc:  # reported by status()
                self.error = exc

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def status(self) -> int:
        self.thread.join(TIMEOUT)
        assert not self.thread.is_alive(), "a held request did not finish"
        assert self.error is None and self.result is not None, self.error
        return self.result[0]


def test_a_third_request_in_flight_gets_429_and_others_are_served(gateway: Gateway,
                                                                  gateway_node: Node) -> None:
    # two keep-alive connections of the limited key, used once and left open (idle)
    a, b = gateway.connect(), gateway.connect()
    try:
        for conn in (a, b):
            assert request(gateway, "GET", "/v1/models", "limited", conn=conn)[0] == 200
        sockets = (a.sock, b.sock)
        assert gateway.conn_cur("limited") == 0  # two idle connections open: nothing in flight

        gateway_node.release.clear()
        held = [Held(gateway, a), Held(gateway, b)]
        try:
            wait_for(lambda: gateway_node.held_now() == 2, "two held requests at the node")
            assert gateway.conn_cur("limited") == 2
            status, headers, body = request(gateway, "GET", "/v1/models", "limited")
            assert status == 429 and headers["retry-after"] == "1"
            assert openai_error(body) == {"message": "too many concurrent requests",
                                          "type": "rate_limit"}
            # another key is not held back by this one's limit
            assert request(gateway, "GET", "/v1/models", "other")[0] == 200
        finally:
            gateway_node.release.set()
        assert [h.status() for h in held] == [200, 200]

        wait_for(lambda: gateway.conn_cur("limited") == 0, "the limited key's counter to drop")
        # the same keep-alive connections, still open, are served again
        for conn in (a, b):
            assert request(gateway, "GET", "/v1/models", "limited", conn=conn)[0] == 200
        assert (a.sock, b.sock) == sockets

        # idle keep-alive connections do not count: with a and b open, two more fit
        gateway_node.release.clear()
        more = [Held(gateway, gateway.connect()), Held(gateway, gateway.connect())]
        try:
            wait_for(lambda: gateway_node.held_now() == 2, "two more held requests at the node")
            assert gateway.conn_cur("limited") == 2
        finally:
            gateway_node.release.set()
        assert [h.status() for h in more] == [200, 200]
        assert request(gateway, "GET", "/v1/models", "limited", conn=a)[0] == 200
    finally:
        gateway_node.release.set()
        a.close()
        b.close()


def test_a_key_at_its_limit_back_to_back_is_never_refused(gateway: Gateway) -> None:
    # 2 clients of a key limited to 2, each sending its next request as soon as it has the
    # answer, on its keep-alive connection: the counter drops with each response, never late
    statuses: list[int] = []
    lock = threading.Lock()

    def client() -> None:
        conn = gateway.connect()
        try:
            for _request in range(300):
                status = request(gateway, "GET", "/v1/models", "limited", conn=conn)[0]
                with lock:
                    statuses.append(status)
        finally:
            conn.close()

    threads = [threading.Thread(target=client, daemon=True) for _client in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert len(statuses) == 600 and set(statuses) == {200}


# --- what was there before -----------------------------------------------------------------------


def test_unknown_keys_get_401_and_other_paths_404(gateway: Gateway) -> None:
    status, headers, body = request(gateway, "GET", "/v1/models", None)
    assert status == 401 and headers["www-authenticate"] == "Bearer"
    assert openai_error(body)["type"] == "authentication_error"
    assert request(gateway, "GET", "/metrics", "other")[0] == 404


def test_the_request_rate_limit_still_gives_429(gateway: Gateway) -> None:
    statuses = [request(gateway, "GET", "/v1/models", "rated") for _request in range(4)]
    assert [s[0] for s in statuses] == [200, 200, 200, 429]
    assert statuses[3][1]["retry-after"] == "60"
    assert openai_error(statuses[3][2])["message"] == "rate limit exceeded"


# --- the metrics listener: HAProxy's own Prometheus exporter ------------------------------------


def metrics(gw: Gateway, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", gw.metrics_port, timeout=TIMEOUT)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def test_metrics_listener_serves_haproxys_exporter(gateway: Gateway) -> None:
    """What role monitoring scrapes (job gateway): plain HTTP /metrics on gateway_metrics_port,
    with the backend's servers and their state; no key; any other path 404."""
    status, text = metrics(gateway, "/metrics")
    assert status == 200, text[:500]
    assert re.search(r'^haproxy_server_status\{proxy="vllm",server="node1",state="UP"\} 1$',
                     text, re.M), text[:2000]
    assert "haproxy_process_" in text
    assert not [k for k in [*KEYS.values(), NODE_KEY] if k in text]
    assert metrics(gateway, "/v1/models")[0] == 404
    assert metrics(gateway, "/")[0] == 404
