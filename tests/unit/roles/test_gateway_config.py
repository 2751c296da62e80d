"""Role gateway: the rendered haproxy.cfg and haproxy.service drop-in keep server states.

Real ansible-playbook on localhost (no host changes): the role's defaults and vars, its two
templates rendered into a temp dir. What is checked is what makes a drained or held-out node
stay out of rotation over a reload or a restart of the gateway (docs/gateway.md): the states
are saved before the reload signal and before a stop, and every backend reads them back.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from local_play import role_play, run_local_playbook

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "roles" / "gateway"
PLAYBOOK = role_play("""\
    - ansible.builtin.template:
        src: "{{ role }}/templates/{{ item }}.j2"
        dest: "{{ out }}/{{ item }}"
        mode: "0644"
      loop: [haproxy.cfg, haproxy.service.conf]
""")
BACKENDS = [
    {"name": "node1", "address": "10.88.0.5", "port": 8000, "agent_port": 8001},
    {"name": "node2", "address": "10.88.0.6", "port": 8000, "agent_port": 0},  # no status port
    {"name": "node3", "address": "10.88.0.7", "port": 8000},  # given by hand without one
]


def render(tmp_path: Path, **extra: object) -> dict[str, str]:
    play = tmp_path / "play.yml"
    play.write_text(PLAYBOOK)
    variables = {
        "role": str(ROLE),
        "out": str(tmp_path),
        "_gateway_backends": BACKENDS,
        "fleet_pki_resolved": {"enabled": False},  # plain HTTP to the nodes
        "ansible_python_interpreter": sys.executable,
        **extra,
    }
    run = run_local_playbook(play, variables)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    return {name: (tmp_path / name).read_text() for name in ("haproxy.cfg", "haproxy.service.conf")}


def section(cfg: str, header: str) -> list[str]:
    """The stripped lines of one haproxy.cfg section (up to the next unindented line)."""
    lines = cfg.splitlines()
    start = lines.index(header) + 1
    body = []
    for line in lines[start:]:
        if line and not line[0].isspace():
            break
        if line.strip() and not line.strip().startswith("#"):
            body.append(line.strip())
    return body


def directives(unit: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith(f"{key}=")]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return render(tmp_path_factory.mktemp("gateway"))


def test_the_state_file_is_named_globally_and_read_by_every_backend(rendered):
    cfg = rendered["haproxy.cfg"]
    assert "server-state-file /var/lib/haproxy/server-state" in section(cfg, "global")
    assert "load-server-state-from-file global" in section(cfg, "defaults")
    # no section overrides it with 'none'
    assert "load-server-state-from-file none" not in cfg


def test_addresses_come_from_the_configuration_not_the_saved_states(rendered):
    backend = section(rendered["haproxy.cfg"], "backend vllm")
    default_server = next(line for line in backend if line.startswith("default-server"))
    assert default_server.split()[-2:] == ["init-addr", "libc"]
    servers = [line.split()[:3] for line in backend if line.startswith("server ")]
    assert ["server", "node1", "10.88.0.5:8000"] in servers
    assert ["server", "node2", "10.88.0.6:8000"] in servers


def test_the_unit_saves_the_states_between_the_check_and_the_reload_signal(rendered):
    unit = rendered["haproxy.service.conf"]
    save = (
        "-/usr/bin/python3 /usr/local/lib/instinct-vllm/instinct-haproxy-save-state "
        "/run/haproxy/admin.sock /var/lib/haproxy/server-state /etc/haproxy/haproxy.cfg"
    )
    # '' resets the package's list, then: check the config, save, signal the reload
    assert directives(unit, "ExecReload") == [
        "",
        "/usr/sbin/haproxy -Ws -f $CONFIG -c -q $EXTRAOPTS",
        save,
        "/bin/kill -USR2 $MAINPID",
    ]
    assert directives(unit, "ExecStop") == [save]  # a restart keeps them too


def test_the_socket_and_file_variables_reach_both_templates(tmp_path):
    out = render(
        tmp_path, gateway_server_state_file="/srv/gw/state", gateway_admin_socket="/run/gw.sock"
    )
    assert "server-state-file /srv/gw/state" in section(out["haproxy.cfg"], "global")
    assert "stats socket /run/gw.sock mode 600 level admin" in section(out["haproxy.cfg"], "global")
    for line in directives(out["haproxy.service.conf"], "ExecStop"):
        assert line.endswith("save-state /run/gw.sock /srv/gw/state /etc/haproxy/haproxy.cfg")


def test_each_node_with_a_status_port_has_the_agent_check(rendered):
    """The node's watchdog verdict (docs/gateway.md, "Hung nodes"); without a status port the
    node keeps the GET /health check alone."""
    backend = section(rendered["haproxy.cfg"], "backend vllm")
    assert [line for line in backend if line.startswith("server ")] == [
        "server node1 10.88.0.5:8000 agent-check agent-port 8001",
        "server node2 10.88.0.6:8000",
        "server node3 10.88.0.7:8000",
    ]
    default_server = next(line for line in backend if line.startswith("default-server"))
    assert "agent-inter 1s" in default_server
    assert default_server.split()[:3] == ["default-server", "check", "inter"]


def test_requests_without_a_response_byte_are_retried_on_another_node(rendered):
    backend = section(rendered["haproxy.cfg"], "backend vllm")
    assert "retry-on conn-failure empty-response" in backend
    assert "option redispatch 1" in backend and "retries 2" in backend


def test_with_mtls_every_instance_is_verified_against_its_hosts_name(tmp_path):
    """Two vLLM instances of node1 (servers node1:0 and node1:1, host node1) present node1's
    certificate; an entry given by hand without host is verified against its name."""
    backends = [
        {"name": "node1:0", "host": "node1", "address": "10.88.0.5", "port": 8000,
         "agent_port": 9000},
        {"name": "node1:1", "host": "node1", "address": "10.88.0.5", "port": 8001,
         "agent_port": 9001},
        {"name": "node2", "address": "10.88.0.6", "port": 8000},
    ]
    out = render(tmp_path, _gateway_backends=backends, fleet_pki_resolved={"enabled": True})
    backend = section(out["haproxy.cfg"], "backend vllm")
    assert [line for line in backend if line.startswith("server ")] == [
        "server node1:0 10.88.0.5:8000 verifyhost node1 agent-check agent-port 9000",
        "server node1:1 10.88.0.5:8001 verifyhost node1 agent-check agent-port 9001",
        "server node2 10.88.0.6:8000 verifyhost node2",
    ]
