"""A short real serve: one completion from the node's model.

The node's running vLLM service answers it through its API when the service is active (what
clients get, with the service's own flags; and on a GPU node a second server could not get the
memory the service holds). A service that is still starting (activating: the model loads) is
waited for, up to a bound. When the node has no vLLM unit at all (first contact, before role
vllm_service), a short-lived server is started from the node's venv on 127.0.0.1 with a one-time
API key passed in its environment (never argv), asked once, and stopped. A failed, restarting,
stopped or masked unit is a failed check: the node is not put back into service on top of it,
and no second vLLM is started on GPUs it may take. unit.py holds the decision. Over https
(a service or a temporary server with --ssl-certfile) the client verifies the server with the
spec's `tls` and presents its client certificate (_tls_client.py).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from .._tls_client import TlsClient, tls_reason
from .probe import Runner, tail
from .result import ERROR, FAILED, OK, SKIPPED, CheckResult, redact
from .unit import FAIL, USE_SERVICE, UnitUnreadable, read_unit, settle


@dataclass
class ServeSpec:
    # the node's serving facts (role vllm_service's vllm_service_resolved): no defaults here,
    # the caller passes them (unit, URL, the venv's python)
    service: str
    base_url: str
    python: str
    mode: str = "auto"  # auto | service | temporary
    api_key: str = ""
    model: str = ""
    prompt: str = "The capital of France is"
    max_tokens: int = 8
    timeout: float = 120.0
    # temporary server (python above)
    model_path: str = ""
    server_args: list[str] = field(default_factory=list)
    server_env: dict[str, str] = field(default_factory=dict)
    startup_timeout: float = 900.0
    # an activating unit (its model loading): seconds to wait at most, seconds between looks
    activating_timeout: float = 3600.0
    poll_interval: float = 5.0
    # https: the CA that signed the server's certificate and the client certificate
    tls: TlsClient = field(default_factory=TlsClient)


def request(url: str, api_key: str, body: dict[str, Any] | None, timeout: float,
            tls: TlsClient | None = None) -> tuple[int, Any]:
    """(HTTP status, parsed JSON or text); status 0 when nothing answered (a TLS failure says
    what to set). No proxy: the node is asked directly."""
    tls = tls or TlsClient()
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST" if body is not None else "GET")
    req.add_header("Content-Type", "application/json")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with tls.urllib_opener().open(req, timeout=timeout) as resp:
            status, raw = resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read().decode(errors="replace")
    except (OSError, urllib.error.URLError, ValueError) as exc:
        return 0, tls_reason(exc, tls) or f"{type(exc).__name__}: {exc}"
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw


def complete(base_url: str, api_key: str, model: str, spec: ServeSpec) -> tuple[bool, str, dict]:
    """One completion through the OpenAI-compatible API: (ok, reason, detail)."""
    root = base_url.rstrip("/").removesuffix("/v1")
    status, models = request(root + "/v1/models", api_key, None, spec.timeout, spec.tls)
    if status != 200 or not isinstance(models, dict):
        return False, f"GET /v1/models answered {status}: {str(models)[:200]}", {}
    served = [m.get("id") for m in models.get("data", [])]
    model = model or (served[0] if served else "")
    if model not in served:
        return False, f"model {model!r} is not served (served: {served})", {"served": served}
    body = {"model": model, "prompt": spec.prompt, "max_tokens": spec.max_tokens, "temperature": 0}
    start = time.monotonic()
    status, answer = request(root + "/v1/completions", api_key, body, spec.timeout, spec.tls)
    latency = round(time.monotonic() - start, 3)
    detail: dict[str, Any] = {"model": model, "served": served, "latency_seconds": latency}
    if status != 200 or not isinstance(answer, dict) or not answer.get("choices"):
        return False, f"POST /v1/completions answered {status}: {str(answer)[:200]}", detail
    choice = answer["choices"][0]
    tokens = (answer.get("usage") or {}).get("completion_tokens", 0)
    detail.update(
        text=str(choice.get("text", ""))[:200],
        finish_reason=choice.get("finish_reason"),
        completion_tokens=tokens,
    )
    if not tokens:
        return False, "the completion has no tokens", detail
    return True, f"{tokens} tokens from {model} in {latency}s", detail


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def server_scheme(argv: list[str]) -> str:
    """https when vLLM's flags give it a certificate (--ssl-certfile), else http."""
    tls = any(a == "--ssl-certfile" or a.startswith("--ssl-certfile=") for a in argv)
    return "https" if tls else "http"


def temporary_server(spec: ServeSpec) -> tuple[bool, str, dict]:
    """Start vLLM's OpenAI server from the venv, one completion, stop it."""
    if not spec.model_path:
        return False, "no running service and no model path for a temporary server", {}
    key = secrets.token_urlsafe(24)
    port = free_port()
    argv = [
        spec.python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        spec.model_path,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *spec.server_args,
    ]
    if spec.model:
        argv += ["--served-model-name", spec.model]
    env = {**os.environ, **spec.server_env, "VLLM_API_KEY": key}
    base = f"{server_scheme(spec.server_args)}://127.0.0.1:{port}"
    detail: dict[str, Any] = {"argv": argv}
    with tempfile.TemporaryFile(mode="w+") as log:
        start = time.monotonic()
        proc = subprocess.Popen(  # argv from the module's options, no shell
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            refused = _wait_ready(proc, base, spec.startup_timeout, spec.tls)
            detail["startup_seconds"] = round(time.monotonic() - start, 1)
            if refused:
                ok, reason = False, f"the temporary server was not ready ({refused})"
            else:
                ok, reason, more = complete(base, key, spec.model, spec)
                detail.update(more)
        finally:
            _stop(proc)
        if not ok:
            log.seek(0)
            detail["log_tail"] = tail(log.read(), 25)
    return ok, reason, redact(detail, [key])


def _exit(proc: subprocess.Popen) -> str:
    code = proc.poll()
    return "still starting at the timeout" if code is None else f"it exited {code}"


def _wait_ready(proc: subprocess.Popen, base: str, timeout: float,
                tls: TlsClient | None = None) -> str:
    """'' once /health answers 200; else why not: the server exited, is still starting at the
    timeout, or refused the TLS connection (no use waiting for that)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        status, answer = request(base + "/health", "", None, 5, tls)
        if status == 200:
            return ""
        if status == 0 and str(answer).startswith("TLS: "):
            return str(answer)
        time.sleep(1)
    return _exit(proc)


def serve_check(spec: ServeSpec, run: Runner, check_mode: bool = False) -> CheckResult:
    start = time.monotonic()
    try:
        decision, unit, waited = settle(
            spec.mode,
            spec.service,
            lambda: read_unit(run, spec.service),
            spec.activating_timeout,
            spec.poll_interval,
        )
    except UnitUnreadable as exc:
        return CheckResult("serve", ERROR, str(exc), {"mode": "service"}, time.monotonic() - start)
    seen = {
        "service": unit.active or "not asked",
        "unit": unit.as_dict(),
        "waited_seconds": round(waited, 1),
    }
    if decision.action == FAIL:
        detail = {"mode": "service", **seen}
        return CheckResult("serve", FAILED, decision.reason, detail, time.monotonic() - start)
    if decision.action == USE_SERVICE:
        ok, reason, detail = complete(spec.base_url, spec.api_key, spec.model, spec)
        detail = {"mode": "service", **seen, "base_url": spec.base_url, **detail}
    elif check_mode:
        reason = f"check mode: would start a temporary server ({decision.reason})"
        return CheckResult("serve", SKIPPED, reason, {"mode": "temporary", **seen})
    else:
        ok, reason, detail = temporary_server(spec)
        detail = {"mode": "temporary", "why": decision.reason, **seen, **detail}
    result = CheckResult("serve", OK if ok else FAILED, reason, detail, time.monotonic() - start)
    return CheckResult(**redact(result.__dict__, [spec.api_key]))
