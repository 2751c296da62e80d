"""Role monitoring's alert rules and Prometheus config, checked by the distribution's promtool.

The templates are rendered with the role's defaults (as the role does, with the delimiters the
rules template declares in its #jinja2 header), then `promtool check rules`, `promtool test
rules` (tests/unit/fixtures/monitoring/alerts-test.yml) and `promtool check config` run on
them. promtool comes with Debian's prometheus package (scripts/host-packages).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible_collections.instinct.vllm.plugins.filter.monitoring import scrape_targets
from tls_pki import Ca

# tests/unit/conftest.py's (this directory's conftest.py shadows it as a module)
ROOT = Path(__file__).resolve().parents[3]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

ROLE = ROOT / "roles" / "monitoring"
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool missing: run scripts/host-packages"
)


def defaults(**over: object) -> dict:
    values = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    values |= yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    # what targets.yml reads from nodes that publish the default unit name
    values.update(ansible_managed="Ansible managed", monitoring_vllm_api_key="",
                  _monitoring_vllm_unit_regex="vllm[.]service",
                  fleet_pki_resolved={"enabled": False}, monitoring_vllm_scheme="http")
    values.update(over)
    return values


def render(name: str, values: dict) -> str:
    text = (ROLE / "templates" / name).read_text()
    options: dict[str, object] = {}
    first, _newline, rest = text.partition("\n")
    if first.startswith("#jinja2:"):
        for key, value in re.findall(r"(\w+)\s*:\s*('[^']*'|\w+)", first.removeprefix("#jinja2:")):
            options[key] = value.strip("'") if value.startswith("'") else value == "True"
        text = rest
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, **options
    )
    env.filters["to_json"] = json.dumps
    return env.from_string(text).render(**values)


def promtool(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PROMTOOL, *map(str, args)],
        capture_output=True, text=True, cwd=cwd, check=False, timeout=120,
    )


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    path = tmp_path / "instinct-vllm.yml"
    path.write_text(render("vllm-alerts.yml.j2", defaults()))
    return path


def test_rules_pass_promtool_check(rules: Path) -> None:
    run = promtool("check", "rules", rules)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS: 11 rules found" in run.stdout, run.stdout


def test_rules_unit_tests_pass(rules: Path) -> None:
    test = rules.parent / "alerts-test.yml"
    shutil.copy(FIXTURES / "monitoring" / "alerts-test.yml", test)
    run = promtool("test", "rules", test.name, cwd=rules.parent)
    assert run.returncode == 0, run.stdout + run.stderr


def test_rules_unit_tests_fail_on_a_wrong_threshold(tmp_path: Path) -> None:
    """The promtool tests do test the thresholds: a queue threshold of 50 breaks them."""
    (tmp_path / "instinct-vllm.yml").write_text(
        render("vllm-alerts.yml.j2", defaults(monitoring_alert_queue_depth=50))
    )
    shutil.copy(FIXTURES / "monitoring" / "alerts-test.yml", tmp_path / "alerts-test.yml")
    run = promtool("test", "rules", "alerts-test.yml", cwd=tmp_path)
    assert run.returncode != 0
    assert "VllmQueueDepthHigh" in run.stdout + run.stderr


def test_every_alert_name_is_tested(rules: Path) -> None:
    names = {r["alert"] for g in yaml.safe_load(rules.read_text())["groups"] for r in g["rules"]}
    tests = yaml.safe_load((FIXTURES / "monitoring" / "alerts-test.yml").read_text())["tests"]
    tested = {a["alertname"] for t in tests for a in t["alert_rule_test"] if a["exp_alerts"]}
    assert names == tested, f"alerts without a firing test: {sorted(names - tested)}"


def test_sandbox_durations_render(tmp_path: Path) -> None:
    """The short sandbox settings (molecule/serving) still give valid rules."""
    path = tmp_path / "r.yml"
    path.write_text(render("vllm-alerts.yml.j2", defaults(
        monitoring_alert_engine_down_for="6s", monitoring_alert_rate_window="30s")))
    run = promtool("check", "rules", path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "for: 6s" in path.read_text()


def config_values(tmp_path: Path, key: str) -> dict:
    hostvars = {
        "mi300x-01": {"ansible_host": "10.20.0.11", "vllm_service_port": 8000},
        "mi300x-02": {"ansible_host": "10.20.0.12"},
    }
    hosts = list(hostvars)
    rules_dir = tmp_path / "rules.d"
    rules_dir.mkdir()
    (rules_dir / "instinct-vllm.yml").write_text(render("vllm-alerts.yml.j2", defaults()))
    key_file = tmp_path / "vllm-api-key"
    key_file.write_text(key)
    return defaults(
        monitoring_vllm_api_key=key,
        monitoring_vllm_api_key_file=str(key_file),
        monitoring_alertmanagers=["127.0.0.1:9093"],
        _monitoring_rules_dir=str(rules_dir),
        _monitoring_vllm_targets=scrape_targets(hosts, hostvars, "vllm_service_port", 8000),
        _monitoring_node_targets=scrape_targets(hosts, hostvars, "", 9100),
        _monitoring_amd_targets=scrape_targets(hosts[:1], hostvars, "", 5000),
        _monitoring_gateway_targets=[],
    )


def test_config_passes_promtool_and_keeps_the_key_out(tmp_path: Path) -> None:
    key = "config-test-key-5d1c0b7a"
    config = tmp_path / "prometheus.yml"
    config.write_text(render("prometheus.yml.j2", config_values(tmp_path, key)))
    run = promtool("check", "config", config)
    assert run.returncode == 0, run.stdout + run.stderr
    text = config.read_text()
    assert key not in text
    parsed = yaml.safe_load(text)
    jobs = {j["job_name"]: j for j in parsed["scrape_configs"]}
    assert set(jobs) == {"prometheus", "vllm", "node", "amd_gpu"}  # no gateway group here
    key_file = str(tmp_path / "vllm-api-key")
    assert jobs["vllm"]["authorization"] == {"type": "Bearer", "credentials_file": key_file}
    second = {"targets": ["10.20.0.12:8000"], "labels": {"node": "mi300x-02"}}
    assert jobs["vllm"]["static_configs"][1] == second
    amd = [{"targets": ["10.20.0.11:5000"], "labels": {"node": "mi300x-01"}}]
    assert jobs["amd_gpu"]["static_configs"] == amd


def test_config_without_key_sends_no_authorization(tmp_path: Path) -> None:
    values = config_values(tmp_path, "")
    config = tmp_path / "prometheus.yml"
    config.write_text(render("prometheus.yml.j2", values))
    assert promtool("check", "config", config).returncode == 0
    jobs = {j["job_name"]: j for j in yaml.safe_load(config.read_text())["scrape_configs"]}
    assert "authorization" not in jobs["vllm"]


def test_with_mtls_prometheus_scrapes_the_nodes_with_its_certificate(tmp_path: Path) -> None:
    """The nodes serve mTLS (fleet_pki_resolved.enabled): https, the fleet CA and Prometheus'
    own certificate in tls_config, accepted by promtool (which checks the files exist)."""
    config = tmp_path / "prometheus.yml"
    values = config_values(tmp_path, "config-test-key-5d1c0b7a")
    values.update(fleet_pki_resolved={"enabled": True}, monitoring_vllm_scheme="https",
                  _monitoring_config_dir=str(tmp_path))
    Ca(tmp_path, "fleet-ca")
    crt, key = Ca(tmp_path, "fleet-root").issue("prometheus", dns=(), ips=())
    crt.rename(tmp_path / "fleet-client.crt")
    key.rename(tmp_path / "fleet-client.key")
    config.write_text(render("prometheus.yml.j2", values))
    run = promtool("check", "config", config)
    assert run.returncode == 0, run.stdout + run.stderr
    vllm = {j["job_name"]: j for j in yaml.safe_load(config.read_text())["scrape_configs"]}["vllm"]
    assert vllm["scheme"] == "https"
    assert vllm["tls_config"] == {"ca_file": f"{tmp_path}/fleet-ca.crt",
                                  "cert_file": f"{tmp_path}/fleet-client.crt",
                                  "key_file": f"{tmp_path}/fleet-client.key"}
