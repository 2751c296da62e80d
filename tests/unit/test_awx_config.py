"""The controller configuration of awx/ against awx.awx's own modules, offline: every object's
keys, types, choices and required options against the module's DOCUMENTATION options (read from
the pinned ansible wheel, checked in step with the argument_spec its main() builds); the names
objects refer to exist; surveys agree with files/stacks.yml, the roles' argument specs and the
mi300x inventory; the workflow is preflight -> approval -> rolling update -> verify; and
playbooks/awx_configure.yml passes every key the data uses."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path
from typing import Any

import ansible_wheel
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
AWX = ROOT / "awx"
BUILTIN_CREDENTIAL_TYPES = {"Machine"}  # shipped by AWX itself
SURVEY_TYPES = {"text", "textarea", "password", "integer", "float", "multiplechoice", "multiselect"}
TYPES: dict[str, type | tuple[type, ...]] = {
    "str": str,
    "int": int,
    "bool": bool,
    "dict": dict,
    "list": list,
    "float": (int, float),
}


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads Ansible's !unsafe (a literal string the controller templates)."""


_Loader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


def _load(path: Path) -> Any:
    return yaml.load(path.read_text(), Loader=_Loader)


def _data() -> dict[str, list[dict[str, Any]]]:
    data: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(AWX.glob("*.yml")):
        for key, value in _load(path).items():
            assert key not in data, f"{key} in two files of awx/"
            if not key.startswith("_"):
                data[key] = value
    return data


DATA = _data()


MODULES = {  # list in awx/ -> the awx.awx module that applies it
    "awx_organizations": "organization",
    "awx_credential_types": "credential_type",
    "awx_credentials": "credential",
    "awx_execution_environments": "execution_environment",
    "awx_projects": "project",
    "awx_inventories": "inventory",
    "awx_inventory_sources": "inventory_source",
    "awx_job_templates": "job_template",
    "awx_workflow_job_templates": "workflow_job_template",
    "awx_workflow_job_template_nodes": "workflow_job_template_node",
}


def _module(key: str) -> str:
    assert key in MODULES, f"awx/: {key} is none of {sorted(MODULES)}"
    return MODULES[key]


@cache
def module_options(module: str) -> dict[str, Any]:
    """DOCUMENTATION options of awx.awx.<module>, after checking they name the same options as
    the argument_spec main() builds (so the documentation is the spec)."""
    tree = ast.parse(ansible_wheel.module_source("awx.awx", module))
    doc = next(
        n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "DOCUMENTATION"
    )
    options: dict[str, Any] = yaml.safe_load(doc)["options"]
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    spec = next(
        n.value
        for n in ast.walk(main)
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "argument_spec"
    )
    assert isinstance(spec, ast.Call)
    assert {k.arg for k in spec.keywords} == set(options), (
        f"awx.awx.{module}: DOCUMENTATION and argument_spec differ"
    )
    return options


def validate(where: str, value: dict[str, Any], options: dict[str, Any]) -> list[str]:
    """Problems of one object (or suboption dict) against module options."""
    names = {alias: name for name, o in options.items() for alias in [name, *o.get("aliases", [])]}
    problems = [f"{where}: unknown option {k!r}" for k in value if k not in names]
    problems += [
        f"{where}: {n} is required"
        for n, o in options.items()
        if o.get("required") and not ({n, *o.get("aliases", [])} & set(value))
    ]
    for key, item in value.items():
        if key not in names:
            continue
        option = options[names[key]]
        kind = option.get("type", "str")
        if not isinstance(item, TYPES[kind]) or (kind == "int" and isinstance(item, bool)):
            problems.append(f"{where}.{key}: {item!r} is not {kind}")
            continue
        if kind == "list" and option.get("elements"):
            problems += [
                f"{where}.{key}: {e!r} is not {option['elements']}"
                for e in item
                if not isinstance(e, TYPES[option["elements"]])
            ]
        if "choices" in option and item not in option["choices"]:
            problems.append(f"{where}.{key}: {item!r} not in {option['choices']}")
        if kind == "dict" and "suboptions" in option:
            problems += validate(f"{where}.{key}", item, option["suboptions"])
    return problems


OBJECTS = [(key, i, obj) for key, objs in DATA.items() for i, obj in enumerate(objs)]


@pytest.mark.parametrize(("key", "index", "obj"), OBJECTS, ids=[f"{o[0]}[{o[1]}]" for o in OBJECTS])
def test_object_fits_the_awx_module(key: str, index: int, obj: dict[str, Any]) -> None:
    assert validate(f"{key}[{index}]", obj, module_options(_module(key))) == []


def test_the_validator_catches_bad_objects() -> None:
    options = module_options("job_template")
    assert validate("x", {"name": "a", "playbok": "p"}, options) == ["x: unknown option 'playbok'"]
    assert validate("x", {"name": "a", "verbosity": 9}, options) == [
        "x.verbosity: 9 not in [0, 1, 2, 3, 4, 5]"
    ]
    assert validate("x", {"name": "a", "forks": True}, options) == ["x.forks: True is not int"]
    assert validate("x", {}, options) == ["x: name is required"]
    node = module_options("workflow_job_template_node")
    assert validate(
        "n", {"identifier": "i", "workflow": "w", "approval_node": {"timeout": 1}}, node
    ) == ["n.approval_node: name is required"]


def _names(key: str, field: str = "name") -> set[str]:
    return {o[field] for o in DATA[key]}


def test_references_resolve() -> None:
    orgs = _names("awx_organizations")
    for key, _index, obj in OBJECTS:
        assert obj.get("organization", next(iter(orgs))) in orgs, f"{key}: {obj}"
    types = _names("awx_credential_types") | BUILTIN_CREDENTIAL_TYPES
    assert {c["credential_type"] for c in DATA["awx_credentials"]} <= types
    for project in DATA["awx_projects"]:
        assert project["default_environment"] in _names("awx_execution_environments")
    for jt in DATA["awx_job_templates"]:
        assert jt["project"] in _names("awx_projects"), jt["name"]
        assert jt["inventory"] in _names("awx_inventories"), jt["name"]
        assert set(jt.get("credentials", [])) <= _names("awx_credentials"), jt["name"]
        assert (ROOT / jt["playbook"]).is_file(), jt["playbook"]
    for source in DATA["awx_inventory_sources"]:
        assert source["inventory"] in _names("awx_inventories")
        assert source["source_project"] in _names("awx_projects")


def test_a_job_template_per_playbook() -> None:
    wanted = {
        "preflight",
        "site",
        "verify",
        "rolling_update",
        "benchmark",
        "diagnose",
        "acceptance",
    }
    assert {Path(jt["playbook"]).stem for jt in DATA["awx_job_templates"]} == wanted


def test_the_project_is_the_galaxy_repository() -> None:
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    assert [p["scm_url"] for p in DATA["awx_projects"]] == [f"{galaxy['repository']}.git"]


def test_the_execution_environment_is_the_release_image() -> None:
    """The image is named after galaxy.yml's repository owner and version, like the project."""
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    owner = galaxy["repository"].removeprefix("https://github.com/").split("/")[0]
    expected = f"ghcr.io/{owner}/instinct-vllm-ee:{galaxy['version']}"
    assert [e["image"] for e in DATA["awx_execution_environments"]] == [expected]


def test_the_inventory_source_holds_no_vault_file() -> None:
    (source,) = DATA["awx_inventory_sources"]
    folder = ROOT / source["source_path"]
    assert (folder / "hosts.yml").is_file()
    for path in folder.rglob("*"):
        if path.is_file() and path.suffix in {".yml", ".yaml", ".json", ""}:
            assert not path.read_text().startswith("$ANSIBLE_VAULT"), path


def _role_spec(role: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())[
        "argument_specs"
    ]["main"]["options"]


def test_injectors_use_declared_inputs_and_feed_role_variables() -> None:
    role_vars = {name for role in ("vllm_service", "model") for name in _role_spec(role)}
    for ctype in DATA["awx_credential_types"]:
        fields = {f["id"] for f in ctype["inputs"]["fields"]}
        assert set(ctype["inputs"]["required"]) <= fields
        assert all(f.get("secret") for f in ctype["inputs"]["fields"]), (
            f"{ctype['name']}: a secret input"
        )
        for where, injected in ctype["injectors"].items():
            assert where in {"extra_vars", "env"}, where
            for name, template in injected.items():
                assert set(re.findall(r"\{\{\s*(\w+)\s*\}\}", template)) <= fields, (
                    f"{ctype['name']}: {template}"
                )
                assert where == "env" or name in role_vars, (
                    f"{ctype['name']}: {name} is no role variable"
                )


def _questions() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for key in ("awx_job_templates", "awx_workflow_job_templates"):
        for template in DATA[key]:
            assert template.get("survey_enabled", False) == ("survey_spec" in template), template[
                "name"
            ]
            if "survey_spec" in template:
                assert {"name", "description", "spec"} <= set(template["survey_spec"]), template[
                    "name"
                ]
                found += [(template["name"], q) for q in template["survey_spec"]["spec"]]
    return found


QUESTIONS = _questions()


@pytest.mark.parametrize(
    ("template", "question"), QUESTIONS, ids=[f"{t}:{q['variable']}" for t, q in QUESTIONS]
)
def test_survey_question_is_well_formed(template: str, question: dict[str, Any]) -> None:
    assert {"question_name", "variable", "type", "required", "default"} <= set(question), template
    assert question["type"] in SURVEY_TYPES
    if question["type"] == "multiplechoice":
        assert question["default"] in question["choices"]
    if question["type"] == "integer":
        assert isinstance(question["default"], int)
        assert question["min"] <= question["default"] <= question["max"]


def test_the_same_variable_is_asked_the_same_way_everywhere() -> None:
    by_variable: dict[str, dict[str, Any]] = {}
    for template, question in QUESTIONS:
        first = by_variable.setdefault(question["variable"], question)
        assert question == first, (
            f"{template}: {question['variable']} differs from its other surveys"
        )


def _expected_defaults() -> dict[str, Any]:
    """What a node gets without the survey: inventories/mi300x, else the role's default."""
    stacks = yaml.safe_load((ROOT / "files" / "stacks.yml").read_text())
    expected: dict[str, Any] = {"instinct_vllm_stack": stacks["default"]}
    for role in ("model", "vllm_service", "rocm"):
        expected |= {name: o["default"] for name, o in _role_spec(role).items() if "default" in o}
    inventory = _load(ROOT / "inventories" / "mi300x" / "group_vars" / "vllm_nodes" / "main.yml")
    expected |= {k: v for k, v in inventory.items() if not (isinstance(v, str) and "{{" in v)}
    return expected


def test_survey_defaults_are_what_the_inventory_already_has() -> None:
    expected = _expected_defaults()
    for template, question in QUESTIONS:
        if question["variable"] in expected:
            assert question["default"] == expected[question["variable"]], (
                f"{template}: {question['variable']}"
            )
    asked = {q["variable"] for _template, q in QUESTIONS}
    assert asked - set(expected) == {"instinct_vllm_serial"}, (
        "a survey variable no role or inventory knows"
    )


def test_survey_choices_are_the_stack_matrix_and_the_role_choices() -> None:
    stacks = yaml.safe_load((ROOT / "files" / "stacks.yml").read_text())
    choices = {
        "instinct_vllm_stack": list(stacks["stacks"]),
        "model_source": _role_spec("model")["model_source"]["choices"],
        "rocm_reboot_policy": _role_spec("rocm")["rocm_reboot_policy"]["choices"],
    }
    for template, question in QUESTIONS:
        if question["type"] == "multiplechoice":
            assert question["choices"] == choices[question["variable"]], (
                f"{template}: {question['variable']}"
            )


def test_the_rollout_workflow_is_preflight_approval_rolling_update_verify() -> None:
    (workflow,) = DATA["awx_workflow_job_templates"]
    nodes = {n["identifier"]: n for n in DATA["awx_workflow_job_template_nodes"]}
    assert all(n["workflow_job_template"] == workflow["name"] for n in nodes.values())
    children = {c for n in nodes.values() for c in n.get("success_nodes", [])}
    assert children <= set(nodes)
    (start,) = set(nodes) - children
    chain = [start]
    while nodes[chain[-1]].get("success_nodes"):
        (following,) = nodes[chain[-1]]["success_nodes"]
        chain.append(following)
    steps = [
        nodes[i].get("unified_job_template") or ("approval" if "approval_node" in nodes[i] else i)
        for i in chain
    ]
    assert steps == [
        "instinct-vllm preflight",
        "approval",
        "instinct-vllm rolling update",
        "instinct-vllm verify",
    ]
    assert len(chain) == len(nodes)


def test_the_workflow_asks_what_the_rolling_update_asks() -> None:
    """Its answers override each job's survey defaults: a question the rolling update asks and
    the workflow does not would be stuck at that default in every rollout."""
    (workflow,) = DATA["awx_workflow_job_templates"]
    name = "instinct-vllm rolling update"
    (rolling,) = [t for t in DATA["awx_job_templates"] if t["name"] == name]
    asked = [q["variable"] for q in workflow["survey_spec"]["spec"]]
    assert asked == [q["variable"] for q in rolling["survey_spec"]["spec"]]


def _configure_tasks() -> list[dict[str, Any]]:
    return yaml.safe_load((ROOT / "playbooks" / "awx_configure.yml").read_text())[0]["tasks"]


def test_the_configure_playbook_passes_every_key_and_only_module_options() -> None:
    passed: dict[str, set[str]] = {}
    for task in _configure_tasks():
        for key, args in task.items():
            if key.startswith("awx.awx."):
                module = key.removeprefix("awx.awx.")
                options = module_options(module)
                known = set(options) | {a for o in options.values() for a in o.get("aliases", [])}
                assert set(args) <= known, f"{task['name']}: {sorted(set(args) - known)}"
                passed.setdefault(module, set()).update(args)
    for key, objs in DATA.items():
        module = _module(key)
        assert module in passed, f"playbooks/awx_configure.yml applies no awx.awx.{module} ({key})"
        used = {k for o in objs for k in o}
        assert used <= passed[module], (
            f"awx.awx.{module}: {sorted(used - passed[module])} of {key} not passed"
        )


def test_credential_secrets_stay_out_of_the_log() -> None:
    (task,) = [t for t in _configure_tasks() if "awx.awx.credential" in t]
    assert task["no_log"] is True
