"""haproxy_runtime against a fake runtime API on a Unix socket (real socket, HAProxy's formats)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible_collections.instinct.vllm.plugins.module_utils.haproxy_runtime import (
    RuntimeApiError,
    ServerStat,
    admin_state,
    healthy,
    idle,
    parse_admin_state,
    parse_stat,
    set_state,
    stat,
    wait_until,
)

# `show stat` of HAProxy 2.6 (columns cut after weight; the parser reads by name).
STAT = (
    "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,"
    "wredis,status,weight\n"
    "public,FRONTEND,,,3,5,2000,40,0,0,0,0,0,,,,,OPEN,\n"
    "vllm,node1,0,0,{s1},2,,20,0,0,,0,,0,0,0,0,{st1},{w1}\n"
    "vllm,node2,0,0,1,2,,20,0,0,,0,,0,0,0,0,UP,1\n"
    "vllm,BACKEND,0,0,3,5,200,40,0,0,0,0,,0,0,0,0,UP,2\n"
)


# `show servers state vllm` of HAProxy 2.6 (columns cut after srv_uweight).
SERVERS_STATE = (
    "1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight\n"
    "3 vllm 1 node1 10.88.0.5 2 {a1} 1\n"
    "3 vllm 2 node2 10.88.0.6 2 0 1\n\n"
)


class FakeHaproxy:
    """Answers show stat from its state; records set server commands."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.scur = [2]
        self.status = "UP"
        self.weight = 1
        self.commands: list[str] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _answer(self, line: str) -> str:
        self.commands.append(line)
        if line == "show servers state vllm":
            flags = {"UP": 0, "DRAIN": 8, "MAINT": 1}[self.status]
            return SERVERS_STATE.format(a1=flags)
        if line == "show stat":
            scur = self.scur.pop(0) if len(self.scur) > 1 else self.scur[0]
            return STAT.format(s1=scur, st1=self.status, w1=self.weight)
        if line.startswith("set server vllm/node1 state "):
            state = line.rsplit(" ", 1)[1]
            self.status = {"ready": "UP", "drain": "DRAIN", "maint": "MAINT"}[state]
            return "\n"
        return "No such server.\n\n"

    def _serve(self) -> None:
        while True:
            try:
                conn, _peer = self.sock.accept()
            except OSError:
                return
            with conn:
                line = conn.recv(4096).decode().strip()
                conn.sendall(self._answer(line).encode())


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeHaproxy]:
    f = FakeHaproxy(tmp_path / "admin.sock")
    yield f
    f.sock.close()


def test_parse_stat_reads_the_named_server() -> None:
    s = parse_stat(STAT.format(s1=4, st1="DRAIN", w1=0), "vllm", "node1")
    assert s == ServerStat("vllm", "node1", "DRAIN", 4, 0)
    assert not s.up


@pytest.mark.parametrize(
    ("flags", "admin"),
    # 0x08 forced drain (also while DOWN), 0x01 forced maint (wins over drain), 0x10 drain
    # inherited from a tracked server: not ours to clear.
    [(0, "ready"), (8, "drain"), (1, "maint"), (9, "maint"), (16, "ready")],
)
def test_admin_state_from_the_forced_flags(flags: int, admin: str) -> None:
    assert parse_admin_state(SERVERS_STATE.format(a1=flags), "vllm", "node1") == admin


def test_admin_state_unknown_server_or_answer() -> None:
    with pytest.raises(RuntimeApiError, match="vllm/node9"):
        parse_admin_state(SERVERS_STATE.format(a1=0), "vllm", "node9")
    with pytest.raises(RuntimeApiError, match="unexpected answer"):
        parse_admin_state("Can't find backend.\n", "vllm", "node1")


def test_parse_stat_unknown_server_names_it() -> None:
    with pytest.raises(RuntimeApiError, match="vllm/node9"):
        parse_stat(STAT.format(s1=0, st1="UP", w1=1), "vllm", "node9")


def test_set_state_and_stat_over_the_socket(fake: FakeHaproxy) -> None:
    set_state(str(fake.path), "vllm", "node1", "drain")
    assert fake.commands == ["set server vllm/node1 state drain"]
    assert stat(str(fake.path), "vllm", "node1").status == "DRAIN"
    assert admin_state(str(fake.path), "vllm", "node1") == "drain"


def test_set_state_refused_by_haproxy_raises(fake: FakeHaproxy) -> None:
    with pytest.raises(RuntimeApiError, match="No such server"):
        set_state(str(fake.path), "vllm", "nodeX", "drain")


def test_set_state_rejects_unknown_state(fake: FakeHaproxy) -> None:
    with pytest.raises(RuntimeApiError, match="state must be"):
        set_state(str(fake.path), "vllm", "node1", "down")
    assert fake.commands == []


def test_missing_socket_is_a_runtime_api_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeApiError, match="runtime API"):
        stat(str(tmp_path / "none.sock"), "vllm", "node1")


def test_wait_until_idle_polls_until_scur_is_zero(fake: FakeHaproxy) -> None:
    fake.scur = [3, 2, 1, 0]
    sleeps: list[float] = []
    result = wait_until(lambda: stat(str(fake.path), "vllm", "node1"), idle, timeout=60,
                        interval=1.0, sleep=sleeps.append)
    assert result.ok and result.last.scur == 0
    assert len(sleeps) == 3


def test_wait_until_times_out_with_the_last_reading() -> None:
    now = [0.0]

    def clock() -> float:
        return now[0]

    def sleep(s: float) -> None:
        now[0] += s

    busy = ServerStat("vllm", "node1", "DRAIN", 2, 0)
    result = wait_until(lambda: busy, idle, timeout=5, interval=2, clock=clock, sleep=sleep)
    assert not result.ok and result.last.scur == 2 and result.waited == 5


def test_wait_until_zero_timeout_reads_once() -> None:
    reads: list[int] = []

    def read() -> ServerStat:
        reads.append(1)
        return ServerStat("vllm", "node1", "DOWN", 0, 1)

    assert not wait_until(read, healthy, timeout=0).ok
    assert reads == [1]
