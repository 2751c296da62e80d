"""Role preflight's defaults for the model's disk check: which copies role model writes and
where, from role model's published fact model_resolved (rendered by Ansible in a local play,
each case a host with role model's variables as its host variables)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from local_play import run_local_playbook

ROOT = Path(__file__).resolve().parents[3]
PREFLIGHT = ROOT / "roles" / "preflight"
MODEL_DEFAULTS = yaml.safe_load((ROOT / "roles" / "model" / "defaults" / "main.yml").read_text())
CASES = {
    # the mi300x inventory: the checkpoint is on the node, role model converts it
    "path": {"model_source": "path", "model_name": "gpt-oss-120B"},
    "url": {"model_source": "url", "model_root": "/data/models", "model_name": "m"},
    "hf-unconverted": {
        "model_source": "huggingface",
        "model_convert_enabled": False,
        "model_dest_path": "/scratch/m",
    },
    "unset": {},
    # on disk (under tmp, see rendered): a rerun, and a node that has the source only
    "rerun": {"model_source": "huggingface", "model_name": "m"},
    "source-only": {"model_source": "url", "model_name": "m"},
}
ON_DISK = {"rerun": (".instinct-hf-snapshot", "model_convert_manifest.json"),
           "source-only": ("config.json",)}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("preflight-model-disk")
    play = [{
        "hosts": "all",
        "gather_facts": False,
        "vars_files": [f"{PREFLIGHT}/defaults/main.yml", f"{PREFLIGHT}/vars/main.yml"],
        "tasks": [
            # what role preflight's dependency model_facts does
            {"ansible.builtin.include_role": {"name": "instinct.vllm.model_facts"}},
            {"ansible.builtin.include_tasks": f"{PREFLIGHT}/tasks/model_on_disk.yml"},
            {"ansible.builtin.copy": {
                "dest": f"{tmp}/{{{{ inventory_hostname }}}}.json", "mode": "0600",
                "content": "{{ {'copies': preflight_model_copies,"
                           " 'path': preflight_model_disk_path | trim} | to_json }}"}},
        ],
    }]  # fmt: skip
    (tmp / "play.yml").write_text(yaml.safe_dump(play))
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts = {name: {**local, **case} for name, case in CASES.items()}
    for name, files in ON_DISK.items():
        root = tmp / name
        hosts[name]["model_root"] = str(root)
        for file in files:
            done = root / ("m" if file == "model_convert_manifest.json" else "m-src") / file
            done.parent.mkdir(parents=True, exist_ok=True)
            done.write_text("{}")
    (tmp / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    run = run_local_playbook(tmp / "play.yml", {}, str(tmp / "hosts.yml"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    return {name: json.loads((tmp / f"{name}.json").read_text()) for name in CASES}


def test_the_copies_and_the_path_follow_role_models_variables(rendered) -> None:
    unset_dir = f"{MODEL_DEFAULTS['model_root']}/{MODEL_DEFAULTS['model_name']}"
    unset_source = MODEL_DEFAULTS["model_source"]
    assert rendered == {
        "path": {"copies": ["converted copy"], "path": "/srv/models/gpt-oss-120B"},
        "url": {"copies": ["source (url)", "converted copy"], "path": "/data/models/m"},
        "hf-unconverted": {"copies": ["source (huggingface)"], "path": "/scratch/m"},
        # nothing set: role model's own defaults, as role model would write it
        "unset": {"copies": [f"source ({unset_source})", "converted copy"], "path": unset_dir},
        # complete copies on the node need no room
        "rerun": {"copies": [], "path": rendered["rerun"]["path"]},
        "source-only": {"copies": ["converted copy"], "path": rendered["source-only"]["path"]},
    }
    assert rendered["rerun"]["path"].endswith("/rerun/m")


def test_preflight_reads_role_models_fact_not_its_variables() -> None:
    """Role preflight reads model_resolved (role model's publish): naming one of role model's
    variables in its defaults or vars would restate what role model decides from it."""
    model_variables = set(MODEL_DEFAULTS)
    for part in ("defaults", "vars"):
        text = (PREFLIGHT / part / "main.yml").read_text()
        named = sorted(v for v in model_variables if v in text)
        assert not named, f"roles/preflight/{part}/main.yml names role model's {named}"
