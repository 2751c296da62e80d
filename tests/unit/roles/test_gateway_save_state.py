"""roles/gateway/files/instinct-haproxy-save-state against a fake runtime API (a real socket).

The answer of HAProxy 2.6's `show servers state` becomes the state file, each server's port
taken from the configuration about to be loaded; anything else (no socket, an error answer)
leaves the previous file as it was and exits 1.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "roles" / "gateway" / "files" / "instinct-haproxy-save-state"

# `show servers state` of HAProxy 2.6 (columns cut after srv_uweight): node1 drained (admin 8).
STATE = (
    "1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight\n"
    "3 vllm 1 node1 10.88.0.5 2 8 1\n"
    "3 vllm 2 node2 10.88.0.6 2 0 1\n\n"
)


def load_saver() -> ModuleType:
    return load_script("instinct_haproxy_save_state", SCRIPT)


saver = load_saver()


@pytest.fixture
def runtime_api(tmp_path: Path) -> Iterator[tuple[str, list[str], list[str]]]:
    """A Unix socket answering each connection with the next prepared answer."""
    path = str(tmp_path / "admin.sock")
    answers: list[str] = []
    commands: list[str] = []
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)

    def serve() -> None:
        while True:
            try:
                conn, _addr = server.accept()
            except OSError:
                return
            with conn:
                commands.append(conn.recv(4096).decode())
                conn.sendall(answers.pop(0).encode() if answers else b"")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield path, answers, commands
    server.close()


def test_the_answer_becomes_the_state_file(runtime_api, tmp_path, capsys):
    path, answers, commands = runtime_api
    answers.append(STATE)
    state = tmp_path / "server-state"
    assert saver.main(["save", path, str(state)]) == 0
    assert commands == ["show servers state\n"]
    assert state.read_text() == STATE
    assert state.stat().st_mode & 0o777 == 0o640
    assert "2 server state(s) saved" in capsys.readouterr().out


@pytest.mark.parametrize("answer", ["Permission denied\n", "", "Unknown command\n# be_id\n"])
def test_an_answer_in_another_format_keeps_the_previous_file(runtime_api, tmp_path, answer):
    path, answers, _commands = runtime_api
    answers.append(answer)
    state = tmp_path / "server-state"
    state.write_text(STATE)
    assert saver.main(["save", path, str(state)]) == 1
    assert state.read_text() == STATE
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".server-state")] == []


def test_no_socket_keeps_the_previous_file(tmp_path, capsys):
    state = tmp_path / "server-state"
    state.write_text(STATE)
    assert saver.main(["save", str(tmp_path / "gone.sock"), str(state)]) == 1
    assert state.read_text() == STATE
    assert "unchanged" in capsys.readouterr().err


# The full 2.6 line format (25 fields; srv_port is field 18), as HAProxy 2.6.12 wrote it.
FULL = (
    "1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight "
    "srv_iweight srv_time_since_last_change srv_check_status srv_check_result srv_check_health "
    "srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord "
    "srv_use_ssl srv_check_port srv_check_addr srv_agent_addr srv_agent_port\n"
    "4 vllm 1 n1 127.0.0.1 2 8 1 1 5 15 3 3 6 0 0 0 - 18001 - 0 0 - - 0\n"
    "4 vllm 2 n2 127.0.0.1 2 0 1 1 6 15 3 3 6 0 0 0 - 18002 - 0 0 - - 0\n"
)
CONFIG = """global
    stats socket /run/haproxy/admin.sock mode 600 level admin
backend st_keys
    stick-table type string len 64 size 10k
backend vllm
    default-server check inter 2s init-addr libc
    server n1 10.0.0.1:18001
    # server n2 10.0.0.2:9999 (a comment is not a server)
    server n2 10.0.0.2:18003 check
listen other
    server n2 127.0.0.1:7000
"""


def test_ports_are_read_per_backend_from_the_configuration():
    assert saver.config_ports(CONFIG) == {
        ("vllm", "n1"): "18001",
        ("vllm", "n2"): "18003",
        ("other", "n2"): "7000",
    }


def test_the_saved_port_is_the_configuration_s_and_the_admin_state_is_kept(runtime_api, tmp_path):
    path, answers, _commands = runtime_api
    answers.append(FULL)
    state, config = tmp_path / "server-state", tmp_path / "haproxy.cfg"
    config.write_text(CONFIG)
    assert saver.main(["save", path, str(state), str(config)]) == 0
    rows = [line.split() for line in state.read_text().splitlines()[2:]]
    assert [(r[3], r[6], r[18]) for r in rows] == [("n1", "8", "18001"), ("n2", "0", "18003")]


def test_usage():
    assert saver.main(["save"]) == 2


def test_a_missing_final_newline_is_added():
    assert saver.check_state(STATE.rstrip("\n")).endswith("\n")
