"""molecule/awx/awx_job.py, the stand-in for AWX's job launch and workflow engine: the survey
and launch-prompt rules (the sandbox stack only as an added choice), and the workflow walk
(approval, precedence of the workflow's vars over artifacts over a job template's survey
defaults), with the ansible-runner call replaced."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location("awx_job", ROOT / "molecule/awx/awx_job.py")
assert _SPEC and _SPEC.loader
awx_job = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(awx_job)


SANDBOX = {"instinct_vllm_stack": ["cpu"]}  # what the scenario adds to the stack question


def template(name: str) -> dict[str, Any]:
    return awx_job.by_name(awx_job.job_templates(), name, "job template")


def test_survey_defaults_then_answers() -> None:
    deploy = template("instinct-vllm deploy")
    got = awx_job.survey_vars(deploy, {"instinct_vllm_stack": "rocm-7.2.1"})
    assert got["instinct_vllm_stack"] == "rocm-7.2.1" and got["model_source"] == "path"
    assert "model_hf_repo" not in got  # empty and optional: AWX sends nothing


def test_the_sandbox_stack_only_as_an_added_choice() -> None:
    deploy = template("instinct-vllm deploy")
    with pytest.raises(SystemExit, match="is not one of"):
        awx_job.survey_vars(deploy, {"instinct_vllm_stack": "cpu"})
    got = awx_job.survey_vars(deploy, {"instinct_vllm_stack": "cpu"}, SANDBOX)
    assert got["instinct_vllm_stack"] == "cpu"
    # the template's own survey is left as it is
    assert "cpu" not in deploy["survey_spec"]["spec"][0]["choices"]
    with pytest.raises(SystemExit, match="model_name is not a choice question"):
        awx_job.survey_vars(deploy, {}, {"model_name": ["x"]})


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        ({"instinct_vllm_stack": "rocm-9"}, "is not one of"),
        ({"nothing_asked": 1}, "the survey asks no nothing_asked"),
    ],
)
def test_bad_answers_are_refused(answers: dict[str, Any], message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        awx_job.survey_vars(template("instinct-vllm deploy"), answers)


def test_batch_size_bounds() -> None:
    with pytest.raises(SystemExit, match="within bounds"):
        awx_job.survey_vars(template("instinct-vllm rolling update"), {"instinct_vllm_serial": 0})


def test_launch_prompts_only_where_asked() -> None:
    args = argparse.Namespace(tags="vllm_service_unit", skip_tags="")
    assert awx_job.launch_prompts(template("instinct-vllm deploy"), args) == [
        "--tags",
        "vllm_service_unit",
    ]
    with pytest.raises(SystemExit, match="does not ask for tags"):
        awx_job.launch_prompts(template("instinct-vllm verify"), args)
    assert awx_job.launch_vars(template("instinct-vllm benchmark"), {"a": 1}) == {"a": 1}
    with pytest.raises(SystemExit, match="does not ask for extra vars"):
        awx_job.launch_vars(template("instinct-vllm diagnose"), {"a": 1})


def run_workflow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, approval: str, fail: set[str] = frozenset()
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    seen: dict[str, dict[str, Any]] = {}

    def fake_run_job(_args, jt, extravars, ident):
        seen[jt["name"]] = extravars
        status = "failed" if jt["name"] in fail else "successful"
        return {
            "ident": ident,
            "status": status,
            "artifacts": {f"from_{ident}": True, "instinct_vllm_stack": "bogus"},
        }

    monkeypatch.setattr(awx_job, "run_job", fake_run_job)
    args = argparse.Namespace(
        workflow="instinct-vllm rollout",
        approval=approval,
        answers=json.dumps({"instinct_vllm_stack": "cpu", "vllm_service_served_model_name": "x"}),
        extra_choices=json.dumps(SANDBOX),
        workdir=str(tmp_path),
        ident="wf",
    )
    return awx_job.launch_workflow(args), seen


def test_approved_workflow_runs_every_step_with_its_vars(tmp_path, monkeypatch) -> None:
    summary, seen = run_workflow(tmp_path, monkeypatch, "approve")
    assert summary["status"] == "successful"
    assert [n["identifier"] for n in summary["nodes"]] == [
        "preflight",
        "approve",
        "rolling-update",
        "verify",
    ]
    rolling = seen["instinct-vllm rolling update"]
    # the workflow's answer over an artifact of preflight over the job's own survey default
    assert rolling["instinct_vllm_stack"] == "cpu"
    assert rolling["vllm_service_served_model_name"] == "x"
    assert rolling["from_wf-preflight"] is True
    assert "from_wf-preflight" not in seen["instinct-vllm preflight"]
    assert seen["instinct-vllm verify"]["from_wf-rolling-update"] is True
    assert json.loads((tmp_path / "wf.json").read_text()) == summary


def test_denied_approval_stops_and_fails(tmp_path, monkeypatch) -> None:
    summary, seen = run_workflow(tmp_path, monkeypatch, "deny")
    assert summary["status"] == "failed"
    assert [(n["identifier"], n["status"]) for n in summary["nodes"]] == [
        ("preflight", "successful"),
        ("approve", "failed"),
    ]
    assert set(seen) == {"instinct-vllm preflight"}


def test_a_failed_rolling_update_skips_verify(tmp_path, monkeypatch) -> None:
    summary, seen = run_workflow(tmp_path, monkeypatch, "approve", {"instinct-vllm rolling update"})
    assert summary["status"] == "failed"
    assert "instinct-vllm verify" not in seen
