"""Role monitoring's prometheus.yml for the fleet scenario's inventory: every target exists.

The fleet inventory (molecule/fleet/molecule.yml: its hosts, groups, group_vars and host_vars)
plus one Prometheus host in group monitoring, one node moving vLLM's port with
vllm_service_flags_extra, the other running two vLLM instances (vllm_service_instances). Real
ansible-playbook on localhost, through thin test roles that carry the real roles' defaults and
vars (so the inventory overrides them as it would the real roles'): on each node, role
vllm_service's publish.yml (the serving facts role monitoring's main.yml publishes); on each
gateway, role gateway's publish.yml (the facts the playbook's first play publishes) and
haproxy.cfg; on the Prometheus host, role monitoring's targets.yml and prometheus.yml. Then
each scrape target must be a host of its group, at its address, on the port that host's role
listens on: vLLM at each instance's published port (vllm_service_flags_extra counts),
HAProxy's exporter at the bind of haproxy.cfg's metrics frontend (served by use-service
prometheus-exporter); and every host of those groups must be scraped. The unit alerts and the
dashboard's restart panel select every node's published units.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from local_play import run_local_playbook

ROOT = Path(__file__).resolve().parents[3]
FLEET = ROOT / "molecule" / "fleet" / "molecule.yml"
MONITOR = "fleet-mon"
EXTRA_PORT = 9123  # the second node's vLLM port, set only in vllm_service_flags_extra
EXTRA_UNIT = "vllm-b.service"  # and its unit (vllm_service_name)
INSTANCES = 2  # the first node runs two vLLM instances: vllm@0 and vllm@1 on ports 8000, 8001
INSTANCE_UNITS = [f"vllm@{i}.service" for i in range(INSTANCES)]
THIN_ROLES = {
    "vllm_service_publish": ("vllm_service", """
- ansible.builtin.include_role:
    name: instinct.vllm.vllm_facts
- ansible.builtin.include_role:
    name: instinct.vllm.fleet_pki_facts
- ansible.builtin.include_tasks: @ROOT@/roles/vllm_service/tasks/publish.yml
"""),
    "gateway_render": ("gateway", """
- ansible.builtin.include_role:
    name: instinct.vllm.fleet_pki_facts
- ansible.builtin.include_tasks: @ROOT@/roles/gateway/tasks/publish.yml
- ansible.builtin.set_fact:
    _gateway_backends: [{name: node, address: 127.0.0.1, port: 8000}]
- ansible.builtin.template:
    src: @ROOT@/roles/gateway/templates/haproxy.cfg.j2
    dest: "@OUT@/{{ inventory_hostname }}.haproxy.cfg"
    mode: "0600"
  delegate_to: localhost
"""),
    "monitoring_render": ("monitoring", """
- ansible.builtin.include_role:
    name: instinct.vllm.fleet_pki_facts
- ansible.builtin.include_tasks: @ROOT@/roles/monitoring/tasks/targets.yml
- ansible.builtin.template:
    src: @ROOT@/roles/monitoring/templates/prometheus.yml.j2
    dest: "@OUT@/prometheus.yml"
    mode: "0600"
- ansible.builtin.template:
    src: @ROOT@/roles/monitoring/templates/vllm-alerts.yml.j2
    dest: "@OUT@/vllm-alerts.yml"
    mode: "0600"
- ansible.builtin.copy:
    content: "{{ _monitoring_dashboard | to_nice_json(indent=2) }}"
    dest: "@OUT@/dashboard.json"
    mode: "0600"
"""),
}
PLAYBOOK = """
- hosts: vllm_nodes
  gather_facts: false
  roles: [{roles}/vllm_service_publish]
- hosts: gateways
  gather_facts: false
  roles: [{roles}/gateway_render]
- hosts: monitoring
  gather_facts: false
  roles: [{roles}/monitoring_render]
"""


def fleet_inventory() -> dict[str, Any]:
    """The fleet scenario's inventory, every host local, plus the Prometheus host; the nodes
    carry the facts exporters.yml sets on the cpu stack (node_exporter on, AMD's exporter off)."""
    config = yaml.safe_load(FLEET.read_text())
    inventory = config["provisioner"]["inventory"]
    groups: dict[str, dict[str, Any]] = {}
    for name, values in inventory["group_vars"].items():
        groups.setdefault(name, {"hosts": {}})["vars"] = values
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    for platform in config["platforms"]:
        host = {**inventory.get("host_vars", {}).get(platform["name"], {}), **local}
        if "vllm_nodes" in platform["groups"]:
            host |= {"_monitoring_node_exporter_on": True, "_monitoring_amd_exporter_on": False}
        for group in platform["groups"]:
            groups.setdefault(group, {"hosts": {}})["hosts"][platform["name"]] = host
    groups["monitoring"] = {"hosts": {MONITOR: dict(local)}}
    first, second = sorted(groups["vllm_nodes"]["hosts"])[:2]
    groups["vllm_nodes"]["hosts"][first] |= {"vllm_service_instances": INSTANCES,
                                             "vllm_service_status_port": 8100}
    groups["vllm_nodes"]["hosts"][second]["vllm_service_flags_extra"] = f"--port={EXTRA_PORT}"
    groups["vllm_nodes"]["hosts"][second]["vllm_service_name"] = EXTRA_UNIT.removesuffix(".service")
    all_vars = groups.pop("all", {}).get("vars", {})
    return {"all": {"vars": all_vars, "children": groups}}


def thin_role(directory: Path, name: str, real: str, tasks: str, out: Path) -> None:
    role = directory / name
    (role / "tasks").mkdir(parents=True)
    for part in ("defaults", "vars", "files"):
        (role / part).symlink_to(ROOT / "roles" / real / part)
    (role / "tasks" / "main.yml").write_text(
        "---" + tasks.replace("@ROOT@", str(ROOT)).replace("@OUT@", str(out))
    )


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    tmp = tmp_path_factory.mktemp("fleet-monitoring")
    roles, out = tmp / "roles", tmp / "out"
    out.mkdir()
    for name, (real, tasks) in THIN_ROLES.items():
        thin_role(roles, name, real, tasks, out)
    inventory = fleet_inventory()
    (tmp / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp / "play.yml").write_text(PLAYBOOK.format(roles=roles))
    run = run_local_playbook(tmp / "play.yml", {}, inventory=str(tmp / "hosts.yml"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    return inventory, out


def hosts_of(inventory: dict[str, Any], group: str) -> dict[str, dict[str, Any]]:
    return inventory["all"]["children"].get(group, {}).get("hosts", {})


def hostvar(inventory: dict[str, Any], host: str, group: str, name: str) -> Any:
    """A host's variable from its host vars, else its group's vars, else None."""
    host_vars = hosts_of(inventory, group)[host]
    group_vars = inventory["all"]["children"][group].get("vars", {})
    return host_vars.get(name, group_vars.get(name))


def role_default(role: str, name: str) -> Any:
    return yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())[name]


def static_configs(out: Path, job: str) -> list[dict[str, Any]]:
    config = yaml.safe_load((out / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    assert job in jobs, f"prometheus.yml has no job {job}: {sorted(jobs)}"
    return jobs[job]["static_configs"]


def targets(out: Path, job: str) -> dict[str, list[str]]:
    """node label -> the host:port targets of one job of the rendered prometheus.yml."""
    found: dict[str, list[str]] = {}
    for static in static_configs(out, job):
        found.setdefault(static["labels"]["node"], []).extend(static["targets"])
    return found


def metrics_bind(cfg: str) -> str:
    """host:port of haproxy.cfg's frontend that serves prometheus-exporter at /metrics."""
    for section in re.split(r"\n(?=\S)", cfg):
        if "use-service prometheus-exporter if { path /metrics }" in section:
            bind = re.search(r"^\s+bind (\S+)", section, re.M)
            assert bind, section
            return bind.group(1)
    raise AssertionError("haproxy.cfg has no frontend with use-service prometheus-exporter")


def test_every_gateway_is_scraped_where_its_haproxy_exports(rendered) -> None:
    inventory, out = rendered
    gateways = hosts_of(inventory, "gateways")
    assert gateways, "the fleet inventory has no gateway"
    found = targets(out, "gateway")
    assert set(found) == set(gateways)
    for host, [target] in found.items():
        address, _colon, port = target.rpartition(":")
        assert address == (hostvar(inventory, host, "gateways", "ansible_host") or host)
        cfg = (out / f"{host}.haproxy.cfg").read_text()
        assert metrics_bind(cfg).rpartition(":")[2] == port, f"{host}: {target} vs haproxy.cfg"


def test_every_node_is_scraped_where_vllm_listens(rendered) -> None:
    inventory, out = rendered
    nodes = hosts_of(inventory, "vllm_nodes")
    assert len(nodes) == 2
    for job in ("vllm", "node"):
        assert set(targets(out, job)) == set(nodes), job
    for host, found in targets(out, "vllm").items():
        addresses = {target.rpartition(":")[0] for target in found}
        assert addresses == {hostvar(inventory, host, "vllm_nodes", "ansible_host") or host}
        ports = [int(target.rpartition(":")[2]) for target in found]
        if "vllm_service_flags_extra" in hosts_of(inventory, "vllm_nodes")[host]:
            assert ports == [EXTRA_PORT], host
            continue
        base = int(hostvar(inventory, host, "vllm_nodes", "vllm_service_port")
                   or role_default("vllm_service", "vllm_service_port"))
        count = hostvar(inventory, host, "vllm_nodes", "vllm_service_instances") or 1
        assert ports == [base + i for i in range(count)], host  # each instance's port


def test_each_instance_of_a_node_that_runs_several_is_labelled(rendered) -> None:
    """The two instances of the first node: one static_config each, labelled with the node and
    the instance (vllm_instance); the node with one keeps the node label alone."""
    inventory, out = rendered
    first, second = sorted(hosts_of(inventory, "vllm_nodes"))
    assert [c["labels"] for c in static_configs(out, "vllm")] == [
        {"node": first, "vllm_instance": "vllm@0"}, {"node": first, "vllm_instance": "vllm@1"},
        {"node": second}]


def test_monitoring_reads_the_gateways_published_metrics_port() -> None:
    """The port is the one each gateway publishes (gateway_resolved.metrics_port), no copy of
    role gateway's default in role monitoring."""
    assert "monitoring_gateway_port" not in yaml.safe_load(
        (ROOT / "roles" / "monitoring" / "defaults" / "main.yml").read_text())
    targets_yml = (ROOT / "roles" / "monitoring" / "tasks" / "targets.yml").read_text()
    assert "scrape_targets(hostvars, 'gateway_resolved.metrics_port')" in targets_yml


def test_the_unit_alerts_watch_every_nodes_unit(rendered) -> None:
    """VllmServiceNotActive and VllmServiceRestarted select each node's published unit names:
    every instance's of the node that runs several."""
    _inventory, out = rendered
    units = [*INSTANCE_UNITS, EXTRA_UNIT]
    rules = yaml.safe_load((out / "vllm-alerts.yml").read_text())
    alerts = {r["alert"]: r["expr"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    for name in ("VllmServiceNotActive", "VllmServiceRestarted"):
        selector = re.search(r'name=~"([^"]+)"', alerts[name])
        assert selector, alerts[name]
        for unit in units:
            assert re.fullmatch(selector.group(1), unit), (name, unit)
        assert not re.fullmatch(selector.group(1), "other.service")


def test_the_dashboard_restarts_watch_every_nodes_unit(rendered) -> None:
    """The dashboard Grafana gets: its restart panel, as Grafana interpolates vllm_unit, selects
    each node's published units (vllm@0.service and vllm@1.service on the first node, which
    runs two instances, vllm-b.service on the second), and no other."""
    _inventory, out = rendered
    units = [*INSTANCE_UNITS, EXTRA_UNIT]
    dashboard = json.loads((out / "dashboard.json").read_text())
    constants = {v["name"]: v["query"] for v in dashboard["templating"]["list"]
                 if v["type"] == "constant"}
    exprs = [t["expr"] for p in dashboard["panels"] if p["type"] != "row" for t in p["targets"]
             if "node_systemd_service_restart_total" in t["expr"]]
    assert exprs, "the dashboard has no restart panel"
    for expr in exprs:
        selector = re.search(r'name=~"([^"]+)"', expr.replace("${vllm_unit:raw}",
                                                              constants["vllm_unit"]))
        assert selector, expr
        for unit in units:
            assert re.fullmatch(selector.group(1), unit), (expr, unit)
        assert not re.fullmatch(selector.group(1), "other.service")
