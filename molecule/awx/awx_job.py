#!/usr/bin/env python
"""Run one job template of awx/ the way AWX runs a job: ansible-runner, process isolation in
the execution environment image, with the template's survey and its credentials' injections.

What AWX does for a job, and what this does in its place (docs/awx.md, "How close the test
comes"):

* project sync: the project's files (here: the checkout's tracked and untracked-not-ignored
  files) go to <private data dir>/project, and collections/requirements.yml is installed into
  <private data dir>/requirements_collections (here: this checkout's collection tarball; the
  third-party pins are already in the EE, at the same versions);
* the survey: every question's default, then the given answers, each checked against its
  question (choices, integer bounds) as AWX validates a launch; --extra-choices adds choices
  to a question, as a site adds its own stacks to its copy of awx/ (the scenario: the sandbox
  stack, which the production surveys do not offer);
* the credentials: the Machine credential becomes env/ssh_key (ansible-runner hands it to
  ssh-agent) and `-u`/`--become-method` in env/cmdline; each custom credential type's
  injectors are rendered with its inputs into env/extravars and env/envvars;
* the job: `ansible-runner run --process-isolation --process-isolation-executable podman
  --container-image <EE> ...`, with AWX's collections path in the job environment;
* launch prompts: job tags, skip tags and extra vars only where the template asks for them
  (ask_*_on_launch), launch extra vars above the survey;
* a workflow (--workflow): its nodes from the roots along success_nodes / failure_nodes /
  always_nodes as the job or approval ends; each job node's extra vars are the job template's
  survey defaults, then the artifacts (set_stats) of the jobs before it, then the workflow's
  survey (defaults and answers) above both; an approval node takes --approval (the person's
  answer: approve, or deny = the node fails); the workflow fails when a node fails and nothing
  follows its failure.

  awx_job.py --template "instinct-vllm deploy" --image IMAGE --inventory FILE
             --collection instinct-vllm-X.tar.gz --inputs credential-inputs.json
             --extra-choices '{"instinct_vllm_stack": ["cpu"]}'
             --answers '{"instinct_vllm_stack": "cpu"}'
             --workdir DIR --ident NAME [--extra-vars JSON] [--container-option OPT ...]
  awx_job.py --workflow "instinct-vllm rollout" --approval approve ... (the same options)

Writes DIR/<ident>.json: {"status", "rc", "seconds", "private_data_dir", "ident", "artifacts"}
(a workflow: {"workflow", "status", "seconds", "ident", "nodes": [{"identifier", "status",
"job"}]}, each job node's own summary in DIR/<ident>-<identifier>.json).
Exit code: 0 when the job's (the workflow's) status is "successful".
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jinja2.sandbox
import yaml

ROOT = Path(__file__).resolve().parents[2]
AWX = ROOT / "awx"
# What AWX puts in a job's environment for collections (RunJob.build_env): the project's
# synced requirements first, then the EE's own.
COLLECTIONS_PATH = (
    "/runner/requirements_collections:~/.ansible/collections:/usr/share/ansible/collections"
)


class AwxLoader(yaml.SafeLoader):
    """awx/ keeps the injector templates literal with Ansible's !unsafe: read them as text."""


AwxLoader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


def load_awx() -> dict[str, Any]:
    """Every variable of awx/*.yml (infra.aap_configuration's names: controller_templates,
    controller_workflows, controller_credentials, ...)."""
    data: dict[str, Any] = {}
    for path in sorted(AWX.glob("*.yml")):
        data |= yaml.load(path.read_text(), Loader=AwxLoader)
    return data


def by_name(items: list[dict[str, Any]], name: str, what: str) -> dict[str, Any]:
    for item in items:
        if item["name"] == name:
            return item
    raise SystemExit(f"awx/: no {what} named {name!r}")


def check_answer(question: dict[str, Any], value: Any) -> None:
    var = question["variable"]
    if question["type"] == "multiplechoice" and value not in question["choices"]:
        raise SystemExit(f"survey answer {var}={value!r} is not one of {question['choices']}")
    if question["type"] == "integer" and not (
        isinstance(value, int) and question.get("min", value) <= value <= question.get("max", value)
    ):
        raise SystemExit(f"survey answer {var}={value!r} is not an integer within bounds")


def survey_vars(
    template: dict[str, Any],
    answers: dict[str, Any],
    extra_choices: dict[str, list[Any]] | None = None,
) -> dict[str, Any]:
    """The survey's extra vars: each question's default, overridden by the given answers;
    extra_choices adds choices to the questions of those variables."""
    spec = template.get("survey_spec", {}).get("spec", []) if template.get("survey_enabled") else []
    questions = {
        q["variable"]: with_choices(q, (extra_choices or {}).get(q["variable"])) for q in spec
    }
    unknown = sorted(set(answers) - set(questions))
    if unknown:
        raise SystemExit(f"{template['name']}: the survey asks no {', '.join(unknown)}")
    out: dict[str, Any] = {}
    for var, question in questions.items():
        value = answers.get(var, question.get("default"))
        if var in answers:
            check_answer(question, value)
        if value not in (None, "") or question.get("required"):
            out[var] = value
    return out


def with_choices(question: dict[str, Any], extra: list[Any] | None) -> dict[str, Any]:
    if not extra:
        return question
    if question["type"] not in ("multiplechoice", "multiselect"):
        raise SystemExit(f"--extra-choices: {question['variable']} is not a choice question")
    return {**question, "choices": [*question["choices"], *extra]}


def render(template: str, inputs: dict[str, Any]) -> str:
    return (
        jinja2.sandbox.ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined)
        .from_string(template)
        .render(**inputs)
    )


def injections(
    template: dict[str, Any], inputs: dict[str, dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, str], list[str], str | None]:
    """What the template's credentials inject: extra vars, env, cmdline args, the SSH key."""
    awx = load_awx()
    credentials, types = awx["controller_credentials"], awx["controller_credential_types"]
    extra: dict[str, Any] = {}
    env: dict[str, str] = {}
    cmdline: list[str] = []
    ssh_key = None
    for name in template.get("credentials", []):
        cred = by_name(credentials, name, "credential")
        given = inputs.get(name)
        if given is None:
            raise SystemExit(f"no inputs for credential {name!r}")
        if cred["credential_type"] == "Machine":
            ssh_key = given["ssh_key_data"]
            cmdline += ["-u", given["username"]]
            if given.get("become_method"):
                cmdline += ["--become-method", given["become_method"]]
            continue
        ctype = by_name(types, cred["credential_type"], "credential type")
        for var, tmpl in ctype.get("injectors", {}).get("extra_vars", {}).items():
            extra[var] = render(tmpl, given)
        for var, tmpl in ctype.get("injectors", {}).get("env", {}).items():
            env[var] = render(tmpl, given)
    return extra, env, cmdline, ssh_key


def project_files() -> list[str]:
    out = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
    ).stdout.decode()
    return [f for f in out.split("\0") if f and (ROOT / f).is_file()]


def project_sync(pdd: Path, collection: Path) -> None:
    """The project checkout and its collections/requirements.yml, as AWX's project update:
    this collection from its tarball (built once per scenario run by scripts/ee, as AWX installs
    a project revision's requirements once and copies them into each job)."""
    project = pdd / "project"
    for rel in project_files():
        dest = project / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest)
    subprocess.run(
        ["ansible-galaxy", "collection", "install", "--offline", "--no-deps", "--force",
         "-p", str(pdd / "requirements_collections"), str(collection)],
        check=True, capture_output=True,
    )  # fmt: skip


def write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(text)


def launch_prompts(template: dict[str, Any], args: argparse.Namespace) -> list[str]:
    """Job tags and skip tags given at launch, refused where the template does not ask."""
    cmdline: list[str] = []
    for option, flag, ask in (
        ("tags", "--tags", "ask_tags_on_launch"),
        ("skip_tags", "--skip-tags", "ask_skip_tags_on_launch"),
    ):
        if value := getattr(args, option):
            if not template.get(ask):
                raise SystemExit(f"{template['name']} does not ask for {option} at launch")
            cmdline += [flag, value]
    return cmdline


def launch_vars(template: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    if given and not template.get("ask_variables_on_launch"):
        raise SystemExit(f"{template['name']} does not ask for extra vars at launch")
    return given


def prepare(
    args: argparse.Namespace, template: dict[str, Any], extravars: dict[str, Any], ident: str
) -> Path:
    """The private data dir of one job: project, inventory, extra vars, env, cmdline, key."""
    inputs = json.loads(Path(args.inputs).read_text())
    extra, env, cmdline, ssh_key = injections(template, inputs)
    pdd = Path(args.workdir) / ident
    shutil.rmtree(pdd, ignore_errors=True)
    project_sync(pdd, Path(args.collection))
    (pdd / "inventory").mkdir()
    shutil.copy(args.inventory, pdd / "inventory" / "hosts.yml")
    write_private(pdd / "env" / "extravars", json.dumps({**extravars, **extra}))
    write_private(
        pdd / "env" / "envvars", json.dumps({**env, "ANSIBLE_COLLECTIONS_PATH": COLLECTIONS_PATH})
    )
    write_private(pdd / "env" / "cmdline", " ".join(cmdline + launch_prompts(template, args)))
    if ssh_key:
        write_private(pdd / "env" / "ssh_key", ssh_key)
    return pdd


def job_artifacts(artifacts: Path) -> dict[str, Any]:
    """What AWX keeps as the job's artifacts: set_stats data, from the playbook_on_stats event."""
    for path in sorted((artifacts / "job_events").glob("*.json"), reverse=True):
        event = json.loads(path.read_text())
        if event.get("event") == "playbook_on_stats":
            return event.get("event_data", {}).get("artifact_data") or {}
    return {}


def run_job(
    args: argparse.Namespace, template: dict[str, Any], extravars: dict[str, Any], ident: str
) -> dict[str, Any]:
    """One job through ansible-runner in the EE; its summary, also in DIR/<ident>.json."""
    # No result of an earlier run may stand in for this one.
    (Path(args.workdir) / f"{ident}.json").unlink(missing_ok=True)
    pdd = prepare(args, template, extravars, ident)
    argv = [
        "ansible-runner",
        "run",
        str(pdd),
        "--playbook",
        template["playbook"],
        "--ident",
        ident,
        "--process-isolation",
        "--process-isolation-executable",
        "podman",
        "--container-image",
        args.image,
    ]
    argv += [f"--container-option={opt}" for opt in args.container_option]
    start = time.monotonic()
    proc = subprocess.run(argv, check=False)
    artifacts = pdd / "artifacts" / ident
    status = (artifacts / "status").read_text().strip() if (artifacts / "status").exists() else ""
    rc_file = artifacts / "rc"
    summary = {
        "template": template["name"],
        "status": status,
        "rc": int(rc_file.read_text()) if rc_file.exists() else proc.returncode,
        "seconds": round(time.monotonic() - start),
        "private_data_dir": str(pdd),
        "ident": ident,
        "artifacts": job_artifacts(artifacts),
    }
    (Path(args.workdir) / f"{ident}.json").write_text(json.dumps(summary, indent=2))
    return summary


def job_templates() -> list[dict[str, Any]]:
    return load_awx()["controller_templates"]


def launch_job(args: argparse.Namespace) -> dict[str, Any]:
    template = by_name(job_templates(), args.template, "job template")
    extravars = {
        **survey_vars(template, json.loads(args.answers), json.loads(args.extra_choices)),
        **launch_vars(template, json.loads(args.extra_vars)),
    }
    return run_job(args, template, extravars, args.ident)


def following(node: dict[str, Any], ok: bool) -> list[str]:
    return node.get("success_nodes" if ok else "failure_nodes", []) + node.get("always_nodes", [])


def run_node(
    args: argparse.Namespace,
    node: dict[str, Any],
    workflow_vars: dict[str, Any],
    artifacts: dict[str, Any],
) -> tuple[bool, dict[str, Any]]:
    """One workflow node: an approval takes --approval; a job runs with the workflow's vars."""
    if "approval_node" in node:
        ok = args.approval == "approve"
        return ok, {"status": "successful" if ok else "failed", "approval": args.approval}
    template = by_name(job_templates(), node["unified_job_template"], "job template")
    extravars = {**survey_vars(template, {}), **artifacts, **workflow_vars}
    job = run_job(args, template, extravars, f"{args.ident}-{node['identifier']}")
    artifacts.update(job["artifacts"])
    return job["status"] == "successful", {"status": job["status"], "job": job["ident"]}


def launch_workflow(args: argparse.Namespace) -> dict[str, Any]:
    workflow = by_name(load_awx()["controller_workflows"], args.workflow, "workflow job template")
    nodes = {n["identifier"]: n for n in workflow["simplified_workflow_nodes"]}
    children = {c for n in nodes.values() for ok in (True, False) for c in following(n, ok)}
    workflow_vars = survey_vars(workflow, json.loads(args.answers), json.loads(args.extra_choices))
    pending, ran, artifacts, failed = sorted(set(nodes) - children), [], {}, False
    start = time.monotonic()
    while pending:
        identifier = pending.pop(0)
        ok, result = run_node(args, nodes[identifier], workflow_vars, artifacts)
        ran.append({"identifier": identifier, **result})
        pending += following(nodes[identifier], ok)
        failed |= not ok and not following(nodes[identifier], False)
    summary = {
        "workflow": args.workflow,
        "status": "failed" if failed else "successful",
        "seconds": round(time.monotonic() - start),
        "ident": args.ident,
        "nodes": ran,
    }
    (Path(args.workdir) / f"{args.ident}.json").write_text(json.dumps(summary, indent=2))
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--template")
    what.add_argument("--workflow")
    parser.add_argument(
        "--approval",
        choices=["approve", "deny"],
        default="deny",
        help="the answer to a workflow's approval nodes",
    )
    parser.add_argument("--image", required=True)
    parser.add_argument("--inventory", required=True)
    parser.add_argument("--collection", required=True, help="this collection's tarball")
    parser.add_argument("--inputs", required=True, help="JSON: {credential name: {input: value}}")
    parser.add_argument("--answers", default="{}", help="JSON: survey answers")
    parser.add_argument(
        "--extra-choices",
        default="{}",
        help="JSON: {survey variable: [choices added to its question]}",
    )
    parser.add_argument("--extra-vars", default="{}", help="JSON: extra vars given at launch")
    parser.add_argument("--tags", default="", help="job tags")
    parser.add_argument("--skip-tags", default="", help="skip tags")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--ident", required=True)
    parser.add_argument("--container-option", action="append", default=[])
    args = parser.parse_args()
    summary = launch_workflow(args) if args.workflow else launch_job(args)
    print(json.dumps({k: v for k, v in summary.items() if k != "artifacts"}))
    return 0 if summary["status"] == "successful" else 1


if __name__ == "__main__":
    sys.exit(main())
