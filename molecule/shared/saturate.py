"""Saturate one vLLM for a bounded time (standard library only).

Keeps a queue of completions deeper than the watchdog's probe timeout and measures it with its
own 1-token "marker" requests (what the watchdog's probe sends), growing the number of clients
until a marker waits longer than --target seconds, then holding that load for --seconds (the
ramp is bounded by --ramp-limit). Once deep, every request waits for its answer until the
hold's end at most: the queue is not drained afterwards (the server aborts a request whose
client went away), and a request cut there is counted as cut, not failed. Prints one JSON line:
requests, failures, cut, the marker latencies, the ramp's and the hold's seconds. The API key
is read from a 0600 environment file (VLLM_API_KEY=..., as the unit's; never argv).

The vllm-source scenario copies it into its node (test_watchdog_saturation.py, plain HTTP on
127.0.0.1); the fleet scenario runs it on the controller against a node's published mTLS port
(test_fleet_saturation.py, --ca-file, --cert-file and --key-file: the controller's client
certificate).

    python3 saturate.py --url http://127.0.0.1:8000 --env-file /etc/vllm/vllm.env \
        --seconds 90 --ramp-limit 120 --target 36 --max-tokens 200 --clients 16 --max-clients 256
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any


def opener(args: argparse.Namespace) -> urllib.request.OpenerDirector:
    """No proxy; over https the given CA and client certificate (mTLS), when named."""
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
    if args.ca_file or args.cert_file:
        context = ssl.create_default_context(cafile=args.ca_file or None)
        if args.cert_file:
            context.load_cert_chain(args.cert_file, args.key_file or None)
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers)


def api_key(env_file: str) -> str:
    """VLLM_API_KEY from a systemd EnvironmentFile ('' when absent)."""
    with open(env_file, encoding="utf-8") as fh:
        for line in fh:
            name, _sep, value = line.strip().partition("=")
            if name == "VLLM_API_KEY":
                return value.strip().strip('"')
    return ""


class Load:
    """Clients sending completions until the deadline, and a marker thread timing 1-token ones."""

    def __init__(self, args: argparse.Namespace, key: str, model: str) -> None:
        self.args = args
        self.key = key
        self.model = model
        self.lock = threading.Lock()
        self.requests = 0
        self.cut = 0  # waiting at the hold's end: the client went away, not a failure
        self.failures: list[str] = []
        self.markers: list[float] = []
        self.began = time.monotonic()
        self.deep_at: float | None = None  # when a marker first waited longer than --target
        self.deadline = self.began + args.ramp_limit  # never deep: stop after the ramp
        self.threads: list[threading.Thread] = []
        self.opener = opener(args)

    def timeout(self) -> float:
        """Seconds a request may wait: just past the hold's end once deep, else the limit."""
        with self.lock:
            if self.deep_at is None:
                return self.args.request_timeout
            left = self.deadline - time.monotonic()
        return max(1.0, min(self.args.request_timeout, left + 0.5))

    def call(self, path: str, payload: dict[str, Any] | None) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"}
        data = json.dumps(payload).encode() if payload is not None else None
        request = urllib.request.Request(self.args.url + path, data=data, headers=headers)
        with self.opener.open(request, timeout=self.timeout()) as response:
            return json.loads(response.read())

    def was_cut(self, exc: BaseException) -> bool:
        """A timeout at or after the hold's end: the driver stopped waiting, the server did not
        fail."""
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        with self.lock:
            ended = self.deep_at is not None and time.monotonic() >= self.deadline
        return ended and isinstance(reason, TimeoutError)

    def complete(self, max_tokens: int) -> None:
        payload = {
            "model": self.model,
            "prompt": "w1 w2 w3",
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
        }
        try:
            body = self.call("/v1/completions", payload)
            ok = bool(body.get("choices"))
            error = "" if ok else f"no choices: {str(body)[:200]}"
        except (OSError, ValueError, urllib.error.URLError) as exc:
            if self.was_cut(exc):
                with self.lock:
                    self.cut += 1
                return
            error = f"{type(exc).__name__}: {exc}"
        with self.lock:
            self.requests += 1
            if error:
                self.failures.append(error)

    def client(self) -> None:
        while time.monotonic() < self.deadline:
            self.complete(self.args.max_tokens)

    def marker(self) -> None:
        """A 1-token request at a time, like the watchdog's probe; grows the clients."""
        while time.monotonic() < self.deadline:
            began = time.monotonic()
            self.complete(1)
            latency = time.monotonic() - began
            with self.lock:
                self.markers.append(round(latency, 1))
                if latency > self.args.target and self.deep_at is None:
                    self.deep_at = time.monotonic()  # the hold starts: --seconds from here
                    self.deadline = self.deep_at + self.args.seconds
            if latency < self.args.target:
                self.grow()
            time.sleep(max(0.0, self.args.marker_interval - latency))

    def grow(self) -> None:
        with self.lock:
            room = self.args.max_clients - len(self.threads)
        for _step in range(max(0, min(self.args.step, room))):
            self.start(self.client)

    def start(self, target: Any) -> None:
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        with self.lock:
            self.threads.append(thread)

    def join(self) -> None:
        """Wait for every client (started ones finish their request; bounded)."""
        while time.monotonic() < self.deadline + self.args.request_timeout:
            with self.lock:
                alive = [t for t in self.threads if t.is_alive()]
            if not alive:
                return
            alive[0].join(1.0)

    def run(self) -> dict[str, Any]:
        for _client in range(self.args.clients):
            self.start(self.client)
        self.start(self.marker)
        self.join()
        return {
            "requests": self.requests,
            "failures": len(self.failures),
            "cut": self.cut,
            "failure_examples": self.failures[:5],
            "clients": len(self.threads) - 1,
            "markers": self.markers,
            "max_marker": max(self.markers, default=0.0),
            "ramp_seconds": round((self.deep_at or self.deadline) - self.began, 1),
            "hold_seconds": round(self.deadline - self.deep_at, 1) if self.deep_at else 0.0,
        }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--env-file", default="/etc/vllm/vllm.env")
    parser.add_argument("--seconds", type=float, default=90.0, help="the hold, once deep")
    parser.add_argument("--ramp-limit", type=float, default=120.0)
    parser.add_argument("--target", type=float, required=True)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--step", type=int, default=16)
    parser.add_argument("--max-clients", type=int, default=256)
    parser.add_argument("--marker-interval", type=float, default=5.0)
    parser.add_argument("--request-timeout", type=float, default=900.0)
    parser.add_argument("--ca-file", default="", help="CA of the node's certificate (https)")
    parser.add_argument("--cert-file", default="", help="client certificate (mTLS)")
    parser.add_argument("--key-file", default="", help="its key")
    args = parser.parse_args()
    key = api_key(args.env_file)
    load = Load(args, key, "")
    load.model = load.call("/v1/models", None)["data"][0]["id"]
    print(json.dumps(load.run()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
