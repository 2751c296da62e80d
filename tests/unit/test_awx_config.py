"""The controller configuration of awx/, offline, against both appliers: infra.aap_configuration
(each list is a variable its dispatch role applies, each object's fields are ones its role reads,
with the options, required fields and choices of its argument specs; tests/unit/fixtures/
aap_configuration.yml, extracted by scripts/aap-config-spec) and awx.awx's own modules (every
object's keys, types, choices and required options against the module's DOCUMENTATION options,
read from the pinned ansible wheel, checked in step with the argument_spec its main() builds).
Also: the names objects refer to exist; the templates in awx/ render to the release's values
unless a site overrides them; surveys agree with files/stacks.yml (GPU stacks only), the roles'
argument specs and the mi300x inventory; the workflow is preflight -> approval -> rolling update
-> verify; and role awx (playbooks/awx_configure.yml) passes every key the data uses."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import Any

import ansible_wheel
import jinja2
import pytest
import yaml
from ansible_collections.instinct.vllm.plugins.plugin_utils import stack_matrix
from jinja2.nativetypes import NativeEnvironment

ROOT = Path(__file__).resolve().parents[2]
AWX = ROOT / "awx"
AAP = yaml.safe_load((Path(__file__).parent / "fixtures" / "aap_configuration.yml").read_text())
BUILTIN_CREDENTIAL_TYPES = {"Machine", "GPG Public Key"}  # shipped by AWX itself
SURVEY_TYPES = {"text", "textarea", "password", "integer", "float", "multiplechoice", "multiselect"}
TYPES: dict[str, type | tuple[type, ...]] = {
    "str": str,
    "int": int,
    "bool": bool,
    "dict": dict,
    "list": list,
    "float": (int, float),
}


class Unsafe(str):
    """An !unsafe string: the controller's own template (an injector), never rendered here."""


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads Ansible's !unsafe (a literal string the controller templates)."""


_Loader.add_constructor("!unsafe", lambda loader, node: Unsafe(loader.construct_scalar(node)))


def _load(path: Path) -> Any:
    return yaml.load(path.read_text(), Loader=_Loader)


def _raw() -> dict[str, list[dict[str, Any]]]:
    data: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(AWX.glob("*.yml")):
        for key, value in _load(path).items():
            assert key not in data, f"{key} in two files of awx/"
            if not key.startswith("_"):
                data[key] = value
    return data


def render(value: Any, context: dict[str, Any]) -> Any:
    """awx/ as Ansible reads it when it applies it: every template rendered (native types, as
    Ansible's templating), the !unsafe ones kept as written."""
    if isinstance(value, dict):
        return {k: render(v, context) for k, v in value.items()}
    if isinstance(value, list):
        return [render(v, context) for v in value]
    if isinstance(value, str) and not isinstance(value, Unsafe) and "{{" in value:
        env = NativeEnvironment(undefined=jinja2.StrictUndefined)
        return env.from_string(value).render(context)
    return value


RAW = _raw()
# No site variable set; every credential's inputs an empty mapping.
DATA = render(RAW, {"awx_credential_inputs": defaultdict(dict)})


MODULES = {  # list in awx/ -> the awx.awx module that applies it
    "aap_organizations": "organization",
    "controller_credential_types": "credential_type",
    "controller_credentials": "credential",
    "controller_execution_environments": "execution_environment",
    "controller_projects": "project",
    "controller_inventories": "inventory",
    "controller_inventory_sources": "inventory_source",
    "controller_templates": "job_template",
    "controller_workflows": "workflow_job_template",
}
NODES = "simplified_workflow_nodes"  # a workflow's nodes (workflow_job_template_node each)


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
WORKFLOW_NODES = [
    (f"controller_workflows[{w}].{NODES}[{n}]", node)
    for w, workflow in enumerate(DATA["controller_workflows"])
    for n, node in enumerate(workflow.get(NODES, []))
]


@pytest.mark.parametrize(("key", "index", "obj"), OBJECTS, ids=[f"{o[0]}[{o[1]}]" for o in OBJECTS])
def test_object_fits_the_awx_module(key: str, index: int, obj: dict[str, Any]) -> None:
    fields = {k: v for k, v in obj.items() if k != NODES}  # the nodes: the next test
    assert validate(f"{key}[{index}]", fields, module_options(_module(key))) == []


@pytest.mark.parametrize(("where", "node"), WORKFLOW_NODES, ids=[w for w, _n in WORKFLOW_NODES])
def test_workflow_node_fits_the_awx_module(where: str, node: dict[str, Any]) -> None:
    assert validate(where, node, module_options("workflow_job_template_node")) == []


# infra.aap_configuration: its dispatch role applies a list when its variable is defined, with
# the roles of that variable (controller_inventory_sources: the role that creates them, then the
# one that syncs them); the role that creates the objects passes on the fields its tasks read.
DISPATCH = {
    var: [d["role"] for d in AAP["dispatch"] if d["var"] == var and d["role"] in AAP["roles"]]
    for var in {d["var"] for d in AAP["dispatch"]}
}
# Where the collection's argument spec declares a type its role does not pass on as declared:
# the node task hands approval_node to awx.awx.workflow_job_template_node, whose approval_node
# is a dict (name, description, timeout); the spec says str.
AAP_SPEC_ERRATA = {("controller_workflow_job_templates", f"{NODES}.approval_node"): "dict"}


def aap_problems(where: str, obj: dict[str, Any], options: dict[str, Any], reads: list[str],
                 errata: dict[str, str]) -> list[str]:  # fmt: skip
    """Fields the role would not pass on, required options missing, values off the spec's
    choices or type."""
    problems = [f"{where}: {k!r} is no field the role reads" for k in obj if k not in reads]
    problems += [
        f"{where}: {k!r} is not in the role's argument spec" for k in obj if k not in options
    ]
    problems += [
        f"{where}: {k} is required"
        for k, o in options.items()
        if o.get("required") and k not in obj
    ]
    for key, value in obj.items():
        option = options.get(key, {})
        kind = errata.get(key, option.get("type"))
        if kind and not isinstance(value, TYPES[kind]):
            problems.append(f"{where}.{key}: {value!r} is not {kind}")
        if "choices" in option and value not in option["choices"]:
            problems.append(f"{where}.{key}: {value!r} not in {option['choices']}")
    return problems


def _aap_role(key: str) -> str:
    assert key in DISPATCH, f"awx/: {key} is no variable infra.aap_configuration's dispatch applies"
    (role,) = set(DISPATCH[key])
    return role


@pytest.mark.parametrize(("key", "index", "obj"), OBJECTS, ids=[f"{o[0]}[{o[1]}]" for o in OBJECTS])
def test_object_fits_infra_aap_configuration(key: str, index: int, obj: dict[str, Any]) -> None:
    role = _aap_role(key)
    spec = AAP["roles"][role]
    errata = {f: t for (r, f), t in AAP_SPEC_ERRATA.items() if r == role and "." not in f}
    assert aap_problems(f"{key}[{index}]", obj, spec["options"], spec["reads"], errata) == []


@pytest.mark.parametrize(("where", "node"), WORKFLOW_NODES, ids=[w for w, _n in WORKFLOW_NODES])
def test_workflow_node_fits_infra_aap_configuration(where: str, node: dict[str, Any]) -> None:
    role = "controller_workflow_job_templates"
    spec = AAP["roles"][role]
    errata = {f.removeprefix(f"{NODES}."): t for (r, f), t in AAP_SPEC_ERRATA.items() if r == role}
    options = spec["options"][NODES]["options"]
    assert aap_problems(where, node, options, spec["node_reads"], errata) == []


def test_the_aap_check_catches_bad_objects() -> None:
    spec = AAP["roles"]["controller_job_templates"]
    good = {"name": "a", "playbook": "p.yml"}
    assert aap_problems("x", good, spec["options"], spec["reads"], {}) == []
    assert aap_problems("x", {**good, "playbok": "p"}, spec["options"], spec["reads"], {}) == [
        "x: 'playbok' is no field the role reads",
        "x: 'playbok' is not in the role's argument spec",
    ]
    assert aap_problems("x", {"playbook": "p"}, spec["options"], spec["reads"], {}) == [
        "x: name is required"
    ]
    assert aap_problems("x", {**good, "verbosity": 9}, spec["options"], spec["reads"], {}) == [
        "x.verbosity: 9 not in [0, 1, 2, 3, 4, 5]"
    ]
    assert aap_problems("x", {**good, "forks": "2"}, spec["options"], spec["reads"], {}) == [
        "x.forks: '2' is not int"
    ]
    wf = AAP["roles"]["controller_workflow_job_templates"]
    node = {"identifier": "i", "workflow_job_template": "w", "approval_node": {"name": "a"}}
    options, reads = wf["options"][NODES]["options"], wf["node_reads"]
    assert aap_problems("n", node, options, reads, {}) == [
        "n.approval_node: {'name': 'a'} is not str"
    ]
    assert aap_problems("n", node, options, reads, {"approval_node": "dict"}) == []


def test_the_extract_is_of_one_commit_of_the_collection() -> None:
    header = (Path(__file__).parent / "fixtures" / "aap_configuration.yml").read_text()
    assert AAP["source"] == "https://github.com/redhat-cop/infra.aap_configuration"
    assert re.fullmatch(r"[0-9a-f]{40}", AAP["commit"]) and AAP["commit"] in header
    assert {r for roles in DISPATCH.values() for r in roles} == set(AAP["roles"])


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
    orgs = _names("aap_organizations")
    for key, _index, obj in OBJECTS:
        assert obj.get("organization", next(iter(orgs))) in orgs, f"{key}: {obj}"
    types = _names("controller_credential_types") | BUILTIN_CREDENTIAL_TYPES
    assert {c["credential_type"] for c in DATA["controller_credentials"]} <= types
    for project in DATA["controller_projects"]:
        assert project["default_environment"] in _names("controller_execution_environments")
    for jt in DATA["controller_templates"]:
        assert jt["project"] in _names("controller_projects"), jt["name"]
        assert jt["inventory"] in _names("controller_inventories"), jt["name"]
        assert set(jt.get("credentials", [])) <= _names("controller_credentials"), jt["name"]
        assert (ROOT / jt["playbook"]).is_file(), jt["playbook"]
    for source in DATA["controller_inventory_sources"]:
        assert source["inventory"] in _names("controller_inventories")
        assert source["source_project"] in _names("controller_projects")
    for workflow in DATA["controller_workflows"]:
        for node in workflow[NODES]:
            assert node["workflow_job_template"] == workflow["name"], node["identifier"]
            assert node.get("lookup_organization", workflow["organization"]) in orgs
            assert node.get("unified_job_template", "instinct-vllm preflight") in _names(
                "controller_templates"
            ), node["identifier"]


def test_credential_inputs_come_from_the_site_at_apply_time() -> None:
    """No secret in awx/: each credential's inputs are the site's awx_credential_inputs entry of
    that very credential, read when the configuration is applied."""
    for credential in RAW["controller_credentials"]:
        name = credential["name"]
        assert credential["inputs"] == f"{{{{ awx_credential_inputs['{name}'] }}}}", name
    secret = {"ssh_key_data": "k"}
    inputs = defaultdict(dict, {"instinct-vllm SSH": secret})
    rendered = render(RAW, {"awx_credential_inputs": inputs})["controller_credentials"]
    assert [c["inputs"] for c in rendered if c["name"] == "instinct-vllm SSH"] == [secret]


def test_a_site_overrides_the_image_and_the_repository() -> None:
    site = {
        "awx_credential_inputs": defaultdict(dict),
        "awx_ee_image": "registry.example/ee:1",
        "awx_ee_credential": "registry login",
        "awx_project_scm_url": "https://git.example/mirror.git",
        "awx_project_scm_branch": "stable",
    }
    data = render(RAW, site)
    (ee,) = data["controller_execution_environments"]
    assert (ee["image"], ee["credential"]) == ("registry.example/ee:1", "registry login")
    (project,) = data["controller_projects"]
    assert (project["scm_url"], project["scm_branch"]) == (
        "https://git.example/mirror.git",
        "stable",
    )


def test_the_project_verifies_its_content_signature() -> None:
    """AWX verifies a project's ansible-sign signature only when the project names a
    credential of its GPG Public Key type (docs/awx.md)."""
    credentials = {c["name"]: c for c in DATA["controller_credentials"]}
    for project in DATA["controller_projects"]:
        name = project.get("signature_validation_credential")
        assert name in credentials, f"{project['name']}: signature_validation_credential {name!r}"
        assert credentials[name]["credential_type"] == "GPG Public Key", name


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
    assert {Path(jt["playbook"]).stem for jt in DATA["controller_templates"]} == wanted


def test_the_project_is_the_galaxy_repository() -> None:
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    assert [p["scm_url"] for p in DATA["controller_projects"]] == [f"{galaxy['repository']}.git"]


def test_the_execution_environment_is_the_release_image() -> None:
    """The image is named after galaxy.yml's repository owner and version, like the project."""
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    owner = galaxy["repository"].removeprefix("https://github.com/").split("/")[0]
    expected = f"ghcr.io/{owner}/instinct-vllm-ee:{galaxy['version']}"
    assert [e["image"] for e in DATA["controller_execution_environments"]] == [expected]


def test_the_inventory_source_holds_no_vault_file() -> None:
    (source,) = DATA["controller_inventory_sources"]
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
    for ctype in DATA["controller_credential_types"]:
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
    for key in ("controller_templates", "controller_workflows"):
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
    for role in ("model", "vllm_service", "rocm", "rollout"):
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


def gpu_stacks() -> list[str]:
    """The stacks of files/stacks.yml that run on GPUs, in the file's order. The others (no
    gpu_archs, no ROCm: cpu, sandbox-rocm-6.2.1) are the test sandbox's."""
    stacks, _origin = stack_matrix.all_stacks()
    return [name for name, stack in stacks.items() if stack["gpu_archs"]]


def test_the_gpu_stacks_leave_out_the_sandbox_ones() -> None:
    stacks, _origin = stack_matrix.all_stacks()
    assert {"cpu", "sandbox-rocm-6.2.1"} <= set(stacks) - set(gpu_stacks())
    assert stack_matrix.default_stack_name() in gpu_stacks()


def production_model_sources() -> list[str]:
    """Role model's sources, in its spec's order, less its test sources (vars/main.yml
    _model_sandbox_sources: demo makes random weights)."""
    sandbox = _load(ROOT / "roles" / "model" / "vars" / "main.yml")["_model_sandbox_sources"]
    return [s for s in _role_spec("model")["model_source"]["choices"] if s not in sandbox]


def test_the_production_model_sources_leave_out_the_sandbox_ones() -> None:
    choices = _role_spec("model")["model_source"]["choices"]
    assert "demo" in set(choices) - set(production_model_sources())
    assert {"path", "huggingface"} <= set(production_model_sources())


def test_no_survey_offers_a_sandbox_stack_or_source() -> None:
    """Production job templates never offer the test sandbox: no stack without GPUs, no model
    source that makes random weights (a site adds its own with its copy of awx/)."""
    stacks, _origin = stack_matrix.all_stacks()
    sandbox = {
        "instinct_vllm_stack": set(stacks) - set(gpu_stacks()),
        "model_source": set(_role_spec("model")["model_source"]["choices"])
        - set(production_model_sources()),
    }
    for template, question in QUESTIONS:
        offered = set(question.get("choices") or []) | {question.get("default")}
        bad = offered & sandbox.get(question["variable"], set())
        assert not bad, f"{template}: {question['variable']} offers {sorted(bad)}"


def test_survey_choices_are_the_stack_matrix_and_the_role_choices() -> None:
    choices = {
        "instinct_vllm_stack": gpu_stacks(),
        "model_source": production_model_sources(),
        "rocm_reboot_policy": _role_spec("rocm")["rocm_reboot_policy"]["choices"],
    }
    for template, question in QUESTIONS:
        if question["type"] == "multiplechoice":
            assert question["choices"] == choices[question["variable"]], (
                f"{template}: {question['variable']}"
            )


def test_the_rollout_workflow_is_preflight_approval_rolling_update_verify() -> None:
    (workflow,) = DATA["controller_workflows"]
    nodes = {n["identifier"]: n for n in workflow[NODES]}
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
    (workflow,) = DATA["controller_workflows"]
    name = "instinct-vllm rolling update"
    (rolling,) = [t for t in DATA["controller_templates"] if t["name"] == name]
    asked = [q["variable"] for q in workflow["survey_spec"]["spec"]]
    assert asked == [q["variable"] for q in rolling["survey_spec"]["spec"]]


def _configure_tasks() -> list[dict[str, Any]]:
    return yaml.safe_load((ROOT / "roles" / "awx" / "tasks" / "main.yml").read_text())


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
    used = {(_module(key), k) for key, objs in DATA.items() for o in objs for k in o if k != NODES}
    used |= {("workflow_job_template_node", k) for _where, node in WORKFLOW_NODES for k in node}
    for module, field in sorted(used):
        assert module in passed, f"role awx applies no awx.awx.{module}"
        assert field in passed[module], f"awx.awx.{module}: {field} of awx/ not passed"


def test_credential_secrets_stay_out_of_the_log() -> None:
    (task,) = [t for t in _configure_tasks() if "awx.awx.credential" in t]
    assert task["no_log"] is True
