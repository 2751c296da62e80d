"""The vLLM virtualenv's place is role vllm's fact: vllm_venv_path's default lives in role vllm
(defaults/main.yml and its argument spec, once, shared by its entry points through a YAML
anchor); roles model and vllm_service read the fact vllm_venv_python role vllm publishes (their
dependency vllm_facts), and no role, playbook, awx/ data or library code restates the path.
Module documentation (EXAMPLES) may show it."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
VENV = yaml.safe_load((ROOT / "roles" / "vllm" / "defaults" / "main.yml").read_text())[
    "vllm_venv_path"
]
ALLOWED = {"roles/vllm/defaults/main.yml": 1, "roles/vllm/meta/argument_specs.yml": 1}


def _sources() -> list[Path]:
    files = [p for p in (ROOT / "roles").rglob("*") if p.is_file() and p.suffix != ".md"]
    files += [*(ROOT / "playbooks").glob("*.yml"), *(ROOT / "awx").glob("*.yml")]
    files += [*(ROOT / "plugins" / "module_utils").rglob("*.py")]
    files += [*(ROOT / "plugins" / "plugin_utils").rglob("*.py")]
    return files


def test_the_venv_path_is_written_once() -> None:
    found = {}
    for path in _sources():
        count = path.read_text(errors="replace").count(VENV)
        if count:
            found[str(path.relative_to(ROOT))] = count
    assert found == ALLOWED, f"{VENV} restated outside role vllm: {found}"


def test_the_source_work_dir_is_role_vllms_alone() -> None:
    """vllm_source_work_dir's default is role vllm's: roles diagnose and benchmark read the
    variable (role vllm's defaults are public after vllm_facts), module diagnose_collect requires
    it; none restates the path."""
    work = yaml.safe_load((ROOT / "roles" / "vllm" / "defaults" / "main.yml").read_text())[
        "vllm_source_work_dir"
    ]
    found = {}
    for path in [*_sources(), *(ROOT / "plugins" / "modules").glob("diagnose_collect.py")]:
        text = path.read_text(errors="replace")
        if work in text or "vllm_source_work_dir | default" in text:
            found[str(path.relative_to(ROOT))] = text.count(work)
    assert found == {"roles/vllm/defaults/main.yml": 1, "roles/vllm/meta/argument_specs.yml": 1}


def test_the_readers_depend_on_vllm_facts() -> None:
    for role in ("model", "vllm_service"):
        meta = yaml.safe_load((ROOT / "roles" / role / "meta" / "main.yml").read_text())
        deps = [d["role"] if isinstance(d, dict) else d for d in meta["dependencies"]]
        assert "instinct.vllm.vllm_facts" in deps, role
