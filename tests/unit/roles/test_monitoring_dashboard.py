"""The Grafana dashboard of role monitoring: valid JSON whose every query is valid PromQL.

Each panel expression (Grafana's $node / $__rate_interval replaced as Grafana would) becomes a
recording rule, which `promtool check rules` parses: a typo in a query fails here, offline.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

# tests/unit/conftest.py's (this directory's conftest.py shadows it as a module)
ROOT = Path(__file__).resolve().parents[3]

DASHBOARD = ROOT / "roles" / "monitoring" / "files" / "instinct-vllm-dashboard.json"
PROMTOOL = shutil.which("promtool")


def panels() -> list[dict]:
    return [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]


def grafana_expr(expr: str) -> str:
    """As Grafana sends it; vllm_unit is a unit regex role monitoring fills in."""
    return (expr.replace("$__rate_interval", "1m").replace("$node", ".*")
            .replace("${vllm_unit:raw}", "vllm-b[.]service"))


def test_dashboard_shape() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] == "instinct-vllm"
    assert {v["name"] for v in dash["templating"]["list"]} == {"datasource", "node", "vllm_unit"}
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels():
        assert panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]


def test_no_query_names_a_unit() -> None:
    """The vLLM unit is role vllm_service's published name (vllm_service_name): a query selects
    it through the constant vllm_unit, which role monitoring fills in, never by name; the file's
    constant is empty."""
    dash = json.loads(DASHBOARD.read_text())
    for panel in panels():
        for target in panel["targets"]:
            if "node_systemd_" in target["expr"]:
                assert 'name=~"${vllm_unit:raw}"' in target["expr"], target["expr"]
            assert ".service" not in target["expr"], target["expr"]
    unit = next(v for v in dash["templating"]["list"] if v["name"] == "vllm_unit")
    assert unit["type"] == "constant" and unit["query"] == ""


def test_both_vllm_generations_are_covered() -> None:
    exprs = " ".join(t["expr"] for p in panels() for t in p["targets"])
    for name in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",  # V1 / 0.6
                 "vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds",
                 "vllm:generation_tokens_total", "vllm:time_to_first_token_seconds_bucket",
                 "gpu_gfx_activity", "gpu_package_power", "gpu_junction_temperature"):
        assert name in exprs, name


@pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: run scripts/host-packages")
def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    rules = [
        {"record": f"dashboard:panel{p['id']}:{t['refId']}", "expr": grafana_expr(t["expr"])}
        for p in panels() for t in p["targets"]
    ]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    run = subprocess.run(
        [PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, check=False,
        timeout=60,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {len(rules)} rules found" in run.stdout
