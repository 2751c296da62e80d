"""scripts/doc-index: docs/index.md and the README's playbook map are what the plugins', roles'
and playbooks' own docs say; --check fails on a stale file."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "doc-index"
di = load_script("doc_index", SCRIPT, reuse=True)


def test_index_is_current():
    assert (ROOT / "docs" / "index.md").read_text() == di.render_index(ROOT), \
        "docs/index.md is stale: run scripts/doc-index"


def test_readme_map_is_current():
    assert (ROOT / "README.md").read_text() == di.readme_with_map(ROOT), \
        "README.md's playbook map is stale: run scripts/doc-index"


def test_check_passes_on_the_checkout():
    run = subprocess.run([sys.executable, SCRIPT, "--check"], capture_output=True, text=True,
                         check=False)
    assert run.returncode == 0, run.stderr


def test_index_lists_every_module_filter_and_role():
    index = (ROOT / "docs" / "index.md").read_text()
    for path in (ROOT / "plugins" / "modules").glob("*.py"):
        if path.stem != "__init__":
            assert f"`instinct.vllm.{path.stem}`" in index
    for path in (ROOT / "plugins" / "filter").glob("*.yml"):
        assert f"`instinct.vllm.{path.stem}`" in index
    for path in (ROOT / "roles").iterdir():
        assert f"`instinct.vllm.{path.name}`" in index


def test_readme_names_every_role():
    """The README's list of roles (public and internal) names each directory of roles/."""
    readme = (ROOT / "README.md").read_text()
    [bullet] = re.findall(r"\n- Roles: .*?(?=\n(?!  )|\Z)", readme, re.S)
    listed = set(re.findall(r"`(\w+)`", bullet))
    missing = sorted(p.name for p in (ROOT / "roles").iterdir() if p.name not in listed)
    assert not missing, f"README.md's list of roles lacks {missing}"


def test_map_names_the_groups_the_plays_run_on():
    table = di.render_map(ROOT)
    assert "| `playbooks/gateway.yml` | Configure the API gateway | `gateways` " \
           "(`instinct_vllm_gateway_group`) | gateway, fleet_pki |" in table
    site = next(line for line in table.splitlines()
                if line.startswith("| `playbooks/site.yml` | Prepare"))
    assert "`vllm_nodes` (`instinct_vllm_hosts`)" in site
    # role node, then the roles it includes (with their dependencies), in order: its
    # tasks/main.yml imports its task files stage.yml and switch.yml
    assert site.endswith("| node, stack, vllm_service_facts, model_facts, vllm_facts, rocm_facts, "
                         "preflight, rocm, vllm, model, fleet_pki_facts, vllm_service (publish), "
                         "vllm (contract), firewall, fleet_pki, vllm_service (stage), "
                         "vllm_service (switch) |")
    gateways, pick, canary, rest = [line for line in table.splitlines()
                                    if line.startswith("| `playbooks/rolling_update.yml` |")]
    # first the gateways publish their facts (the runtime API and backend of the drain)
    assert gateways.endswith("| `gateways` (`instinct_vllm_gateway_group`) | gateway_facts, "
                             "gateway (publish) |")
    assert pick.endswith("| `vllm_nodes` (`instinct_vllm_hosts`) | stack, vllm_service_facts, "
                         "rollout (canary) |")
    assert "| `instinct_vllm_rollout_canary` |" in canary
    assert "| `instinct_vllm_rollout_rest` |" in rest
    # role rollout: the entry point stage of role node, the fingerprint's reference, role
    # rocm's pending reboot once drained, then role node's switch; the canary and the rest alike
    assert canary.split(" | ")[-1] == rest.split(" | ")[-1]
    assert rest.endswith("| stack, vllm_service_facts, rollout, node (stage), model_facts, "
                         "vllm_facts, rocm_facts, preflight, rocm, vllm, model, fleet_pki_facts, "
                         "vllm_service (publish), vllm (contract), firewall, fleet_pki, "
                         "vllm_service (stage), "
                         "fingerprint_gate (reference), rocm (pending_reboot), node (switch), "
                         "vllm_service (switch) |")


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    for part in ("plugins/modules", "plugins/filter", "roles", "playbooks"):
        shutil.copytree(ROOT / part, tmp_path / part)
    for part in ("README.md", "site.yml", "docs/index.md"):
        (tmp_path / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / part, tmp_path / part)
    return tmp_path


def check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, SCRIPT, "--check", "--root", root],
                          capture_output=True, text=True, check=False)


def test_stale_index_fails_then_rewrites(copy: Path):
    assert check(copy).returncode == 0
    spec = copy / "roles" / "model" / "meta" / "argument_specs.yml"
    spec.write_text(spec.read_text().replace(
        "short_description: Put a model checkpoint", "short_description: Place a model checkpoint"))
    run = check(copy)
    assert run.returncode == 1
    assert "docs/index.md is stale" in run.stderr
    subprocess.run([sys.executable, SCRIPT, "--root", copy], check=True, capture_output=True)
    assert "Place a model checkpoint" in (copy / "docs" / "index.md").read_text()
    assert check(copy).returncode == 0


def test_stale_map_fails(copy: Path):
    book = copy / "playbooks" / "gateway.yml"
    book.write_text(book.read_text().replace("default('gateways')", "default('gateway')"))
    run = check(copy)
    assert run.returncode == 1
    assert "README.md is stale" in run.stderr
