"""HAProxy's runtime API (the admin stats socket): read a server's state and change it.

Used by the module gateway_server, which rolling_update.yml runs on the gateway host: drain a
vLLM node (no new requests, running streams finish), wait until it has no stream left, put it
in maintenance or back in rotation. Standard library only; every call returns, nothing prints.
"""

from __future__ import annotations

import csv
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

# Admin states the runtime API sets with `set server <backend>/<server> state <state>`.
STATES: tuple[str, ...] = ("ready", "drain", "maint")


class RuntimeApiError(Exception):
    """The socket could not be reached, or HAProxy refused a command."""


@dataclass(frozen=True)
class ServerStat:
    backend: str
    server: str
    status: str  # UP, DOWN, DRAIN, MAINT, "UP 1/2", "MAINT (via ...)", ...
    scur: int  # streams on the server now (requests in flight through the gateway)
    weight: int

    @property
    def up(self) -> bool:
        return self.status == "UP"


def command(path: str, line: str, timeout: float = 10.0) -> str:
    """Send one command line to the runtime API at `path` and return its whole answer."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(path)
            sock.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
    except OSError as exc:
        raise RuntimeApiError(f"HAProxy runtime API at {path}: {exc}") from exc
    return b"".join(chunks).decode(errors="replace")


def parse_stat(text: str, backend: str, server: str) -> ServerStat:
    """The row of `show stat` (CSV, header line starting with '# ') for backend/server."""
    rows = csv.DictReader(text.lstrip("# ").splitlines())
    for row in rows:
        if row.get("pxname") == backend and row.get("svname") == server:
            return ServerStat(
                backend=backend,
                server=server,
                status=row.get("status", ""),
                scur=int(row.get("scur") or 0),
                weight=int(row.get("weight") or 0),
            )
    raise RuntimeApiError(f"HAProxy has no server {backend}/{server} (show stat)")


def stat(path: str, backend: str, server: str) -> ServerStat:
    return parse_stat(command(path, "show stat"), backend, server)


# srv_admin_state bits (HAProxy's SRV_ADMF_*): the ones `set server ... state` forces.
_FMAINT = 0x01
_FDRAIN = 0x08


def parse_admin_state(text: str, backend: str, server: str) -> str:
    """maint, drain or ready, from `show servers state <backend>` (forced admin flags only:
    `show stat` cannot tell a drained node that is DOWN from one that is ready and DOWN)."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = next((line for line in lines if line.startswith("# be_id")), None)
    if header is None:
        raise RuntimeApiError(f"show servers state {backend}: unexpected answer {text[:200]!r}")
    columns = header[2:].split()
    for line in lines:
        if line.startswith("#"):
            continue
        row = dict(zip(columns, line.split()))  # noqa: B905 (targets may run Python < 3.10)
        if row.get("be_name") == backend and row.get("srv_name") == server:
            flags = int(row.get("srv_admin_state", "0"))
            if flags & _FMAINT:
                return "maint"
            return "drain" if flags & _FDRAIN else "ready"
    raise RuntimeApiError(f"HAProxy has no server {backend}/{server} (show servers state)")


def admin_state(path: str, backend: str, server: str) -> str:
    return parse_admin_state(command(path, f"show servers state {backend}"), backend, server)


def set_state(path: str, backend: str, server: str, state: str) -> None:
    """`set server <backend>/<server> state <state>`; HAProxy answers nothing on success."""
    if state not in STATES:
        raise RuntimeApiError(f"state must be one of {', '.join(STATES)}, not {state!r}")
    answer = command(path, f"set server {backend}/{server} state {state}").strip()
    if answer:
        raise RuntimeApiError(f"set server {backend}/{server} state {state}: {answer}")


@dataclass(frozen=True)
class WaitResult:
    ok: bool
    waited: float
    last: ServerStat


def wait_until(
    read: Callable[[], ServerStat],
    done: Callable[[ServerStat], bool],
    timeout: float,
    interval: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> WaitResult:
    """Poll `read()` until `done(stat)` or `timeout` seconds passed (at least one read)."""
    start = clock()
    while True:
        last = read()
        waited = clock() - start
        if done(last):
            return WaitResult(True, waited, last)
        if waited >= timeout:
            return WaitResult(False, waited, last)
        sleep(min(interval, max(timeout - waited, 0.0)))


def idle(s: ServerStat) -> bool:
    return s.scur == 0


def healthy(s: ServerStat) -> bool:
    return s.up
