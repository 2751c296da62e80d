"""Role vllm_service: the rendered unit (real ansible-playbook on localhost, no host changes).

Publishes role vllm's fact vllm_attention with that role's own task (tasks/attention.yml),
checks the inputs against the role's meta/argument_specs.yml (what Ansible does before the
main entry point; tasks_from skips it, so the play does it here), publishes the serving facts
(tasks_from publish, as the playbooks do), runs the role's assert.yml
(the rules a spec cannot say + argv and environment building) and renders
templates/vllm.service.j2 into a temp dir, then reads the unit back as systemd would split
ExecStart.

The cases run as hosts of one ansible-playbook (a module fixture; local_play.run_cases), each
with its own variables and output directory; the -vvv case runs alone, as a user would.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from local_play import Case, run_cases

ROOT = Path(__file__).resolve().parents[3]
PLAYBOOK = """
- hosts: all
  gather_facts: false
  connection: local
  tasks:
    - ansible.builtin.include_role:
        name: instinct.vllm.vllm
        tasks_from: attention.yml
    - ansible.builtin.validate_argument_spec:
        argument_spec: "{{ spec.argument_specs.main.options }}"
      vars:
        spec: "{{ lookup('ansible.builtin.file', spec_path) | from_yaml }}"
        spec_path: "{{ repo }}/roles/vllm_service/meta/argument_specs.yml"
    - ansible.builtin.include_role:
        name: instinct.vllm.vllm_service
        tasks_from: publish
        public: true
    - ansible.builtin.include_role:
        name: instinct.vllm.vllm_service
        tasks_from: assert.yml
        public: true
    - ansible.builtin.copy:
        content: "{{ vllm_service_resolved | to_json }}"
        dest: "{{ out }}/resolved.json"
        mode: "0644"
    - ansible.builtin.template:
        src: "{{ repo }}/roles/vllm_service/templates/{{ item }}.j2"
        dest: "{{ out }}/{{ item }}"
        mode: "0600"
      loop: [vllm.service, vllm.env]
      vars:  # the instance the case names (else the template's own default, instance 0)
        _vllm_service_instance: "{{ vllm_service_resolved.instances[instance | default(0) | int] }}"
"""


BASE = {
    "vllm_service_api_key": "unit-test-key-0123456789",
    "vllm_service_model": "/srv/models/my model",
    "vllm_service_served_model_name": "tiny",
}


def render(tmp_path: Path, *flags: str,
           **extra: object) -> tuple[subprocess.CompletedProcess[str], str]:
    """One case alone (ansible-playbook's own output and exit code)."""
    play = tmp_path / "play.yml"
    play.write_text(PLAYBOOK)
    variables = {
        "repo": str(ROOT), "out": str(tmp_path), "ansible_python_interpreter": sys.executable,
        **BASE, **extra,
    }
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    run = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(play),
         "-e", json.dumps(variables), *flags],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120, check=False,
    )
    unit = tmp_path / "vllm.service"
    return run, unit.read_text() if unit.exists() else ""


TRITON = "VLLM_USE_TRITON_FLASH_ATTN"
CK = {"instinct_vllm_stack": "rocm-6.2.1", "vllm_source_ck_flash_attention": True}
BAD_INPUT = [
    ({"vllm_service_api_key": "short"}, "vllm_service_api_key"),
    ({"vllm_service_model": ""}, "vllm_service_model"),
    ({"vllm_service_launcher": "docker"}, "vllm_service_launcher"),
    ({"vllm_service_flags": {"api_key": "x" * 20}},
     "vllm_service_flags: flag --api-key is not allowed"),
    ({"vllm_service_flags_extra": "--max-model-len=1 --max_model_len 2"},
     "vllm_service_flags_extra gives the flag --max-model-len twice"),
    ({"vllm_service_status_port": 8100, "vllm_service_flags_extra": {"port": 8100}},
     "vllm_service_status_port (8100) is vLLM's port"),
    ({"vllm_service_status_port": 65536}, "vllm_service_status_port must be 0 (off) or a port"),
    ({"vllm_service_instances": 2},
     "vllm_service_status_port (8001) is vLLM's port or within the 2 instances' ports 8000-8001"),
    ({"vllm_service_instances": 0}, "vllm_service_instances) must be a positive integer"),
    ({"vllm_service_instances": 2, "vllm_service_status_port": 8100,
      "vllm_service_environment": {"HIP_VISIBLE_DEVICES": "0"}},
     "vllm_service_environment sets HIP_VISIBLE_DEVICES, but with 2 instances"),
    ({"vllm_service_instances": 2, "vllm_service_status_port": 8100,
      "vllm_service_watchdog_options": {"status-port": 9000}},
     "vllm_service_watchdog_options sets status-port, one port for 2 instances"),
    ({"vllm_service_instances": 3, "vllm_service_port": 65534, "vllm_service_status_port": 8100},
     "vllm_service_instances (3) needs the ports vllm_service_port (65534) to 65536"),
]
CASES: dict[str, dict[str, Any]] = {  # case -> its variables over BASE
    "defaults": {},
    "flags": {
        "vllm_service_flags": {"dtype": "float32", "enforce-eager": False},
        "vllm_service_flags_extra": {"max_model_len": 512},
        "vllm_service_environment": {"VLLM_CPU_KVCACHE_SPACE": "1", "ODD": "a b%c"},
        "vllm_service_launcher": "api_server",
    },
    "extra-spelling": {"vllm_service_flags_extra": "--max_model_len=512 --port 8100"},
    "published": {"vllm_service_name": "vllm-b", "vllm_service_host": "::1",
                  "vllm_service_served_model_name": "", "vllm_venv_path": "/opt/other",
                  "vllm_service_environment": {"HF_TOKEN": "hf-secret-0123456789"}},
    "status": {"vllm_service_status_port": 9101,
               "vllm_service_status_allow": ["10.0.0.0/8", "fd00::/8"]},
    "status-off": {"vllm_service_status_port": 0},
    # two engines of four GPUs each: instance 1's unit
    "instances": {"vllm_service_instances": 2, "vllm_service_status_port": 8100,
                  "vllm_service_flags": {"tensor-parallel-size": 4}, "instance": 1},
    "instances-0": {"vllm_service_instances": 2, "vllm_service_status_port": 8100,
                    "vllm_service_flags": {"tensor-parallel-size": 4}},
    "ck": CK,
    "no-ck": {"instinct_vllm_stack": "rocm-6.2.1"},  # off, the default
    "ck-agrees": {**CK, "vllm_service_environment": {TRITON: False}},
    "ck-forced-1": {**CK, "vllm_service_environment": {TRITON: "1"}},
    "ck-forced-TRUE": {**CK, "vllm_service_environment": {TRITON: "TRUE"}},
    "no-ck-triton": {"instinct_vllm_stack": "rocm-6.2.1",
                     "vllm_service_environment": {TRITON: "1"}},
    **{f"bad{n}": extra for n, (extra, _needle) in enumerate(BAD_INPUT)},
    # the stack's vllm.service (files/stacks.yml): rocm-7.2.1 has one, the others none
    "cpu-stack": {"instinct_vllm_stack": "cpu"},
    "rocm7": {"instinct_vllm_stack": "rocm-7.2.1"},
    "rocm7-unset": {"instinct_vllm_stack": "rocm-7.2.1",
                    "vllm_service_flags": {"tensor-parallel-size": 8}},
    "rocm7-lower": {"instinct_vllm_stack": "rocm-7.2.1",
                    "vllm_service_flags_extra": "--gpu-memory-utilization 0.85"},
    "rocm7-over": {"instinct_vllm_stack": "rocm-7.2.1",
                   "vllm_service_flags_extra": {"gpu_memory_utilization": 0.95}},
    "rocm7-graphs": {"instinct_vllm_stack": "rocm-7.2.1",
                     "vllm_service_flags": {"enforce-eager": False}},
    "cpu-over": {"instinct_vllm_stack": "cpu",
                 "vllm_service_flags_extra": {"gpu-memory-utilization": 0.95}},
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Case, str, Path]]:
    """Every case of CASES: its result, its unit ("" if none was written), its output dir."""
    tmp = tmp_path_factory.mktemp("vllm-service")
    (tmp / "play.yml").write_text(PLAYBOOK)
    outs = {name: tmp / name for name in CASES}
    for out in outs.values():
        out.mkdir()
    results = run_cases(tmp / "play.yml",
                        {name: {**BASE, **extra, "out": str(outs[name])}
                         for name, extra in CASES.items()},
                        {"repo": str(ROOT)})
    return {name: (results[name], unit.read_text() if (unit := outs[name] / "vllm.service")
                   .exists() else "", outs[name])
            for name in CASES}  # fmt: skip


def ok(rendered: dict[str, tuple[Case, str, Path]], name: str) -> tuple[str, Path]:
    """A case that must pass: its unit and output dir."""
    case, unit, out = rendered[name]
    assert not case.failed, case.output[-2000:]
    return unit, out


def directive(unit: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith(key + "=")]


def test_exec_start_is_wrapper_then_vllm_serve(rendered) -> None:
    unit, _out = ok(rendered, "defaults")
    argv = shlex.split(directive(unit, "ExecStart")[0])
    cut = argv.index("--")
    assert argv[:2] == ["/usr/bin/python3", "/usr/local/libexec/instinct-vllm-watchdog"]
    assert argv[2:cut] == ["--probe-interval", "30", "--status-port", "8001"]
    assert argv[cut + 1 : cut + 4] == ["/opt/vllm/venv/bin/vllm", "serve", "/srv/models/my model"]
    flags = argv[cut + 4 :]
    for pair in (["--tensor-parallel-size", "8"], ["--kv-cache-dtype", "auto"],
                 ["--max-model-len", "32768"], ["--max-num-seqs", "256"],
                 ["--served-model-name", "tiny"], ["--port", "8000"]):
        i = flags.index(pair[0])
        assert flags[i : i + 2] == pair
    assert "--enforce-eager" in flags and "--disable-log-stats" not in flags  # metrics on
    assert "unit-test-key-0123456789" not in unit
    assert directive(unit, "EnvironmentFile") == ["/etc/vllm/vllm.env"]
    assert directive(unit, "Type") == ["notify"]
    assert directive(unit, "WatchdogSec") == ["30"]
    assert directive(unit, "DeviceAllow") == ["/dev/kfd rw", "char-drm rw"]


def test_flags_extra_and_environment(rendered) -> None:
    unit, _out = ok(rendered, "flags")
    argv = shlex.split(directive(unit, "ExecStart")[0])
    cut = argv.index("--")
    assert argv[cut + 1 :] == [
        "/opt/vllm/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server",
        "--model", "/srv/models/my model",
        "--dtype", "float32", "--host", "0.0.0.0", "--max-model-len", "512", "--port", "8000",
        "--served-model-name", "tiny",
    ]
    env = directive(unit, "Environment")
    assert "VLLM_CPU_KVCACHE_SPACE=1" in env
    assert '"ODD=a b%%c"' in env
    assert "HF_HUB_OFFLINE=1" in env


def test_extra_flags_replace_the_defaults_whatever_the_spelling(rendered) -> None:
    """The MI300X defaults say max-model-len 32768; the extra flags, on a command line with
    another spelling, replace it (and the port, which the published fact then carries)."""
    unit, out = ok(rendered, "extra-spelling")
    argv = shlex.split(directive(unit, "ExecStart")[0])
    assert argv.count("--max-model-len") == 1 and "--max_model_len" not in argv
    assert argv[argv.index("--max-model-len") + 1] == "512"
    assert argv[argv.index("--port") + 1] == "8100"
    resolved = json.loads((out / "resolved.json").read_text())
    assert resolved["flags"]["max-model-len"] == 512 and "max_model_len" not in resolved["flags"]
    assert resolved["flags"]["tensor-parallel-size"] == 8
    assert resolved["port"] == 8100 and resolved["url"] == "http://127.0.0.1:8100"
    assert resolved["argv"] == argv[argv.index("/srv/models/my model") + 1 :]


def test_the_published_facts(rendered) -> None:
    _unit, out = ok(rendered, "published")
    resolved = json.loads((out / "resolved.json").read_text())
    assert resolved["unit"] == "vllm-b.service"
    assert resolved["unit_file"] == "/etc/systemd/system/vllm-b.service"
    assert resolved["env_file"] == "/etc/vllm/vllm-b.env"
    assert resolved["python"] == "/opt/other/bin/python" and resolved["venv"] == "/opt/other"
    assert resolved["served_model_name"] == resolved["model"] == "/srv/models/my model"
    assert resolved["url"] == "http://[::1]:8000" and resolved["port"] == 8000
    # no secret in a fact (-v prints facts): not the API key, not the environment
    assert "unit-test-key" not in json.dumps(resolved)
    assert "hf-secret" not in json.dumps(resolved) and "HF_TOKEN" not in json.dumps(resolved)


# --- the gateway's agent check: the wrapper's status port ---------------------------------------


def wrapper_options(unit: str) -> list[str]:
    argv = shlex.split(directive(unit, "ExecStart")[0])
    return argv[2 : argv.index("--")]


def test_the_status_port_and_its_allowed_sources_reach_the_wrapper(rendered) -> None:
    unit, out = ok(rendered, "status")
    assert wrapper_options(unit) == ["--probe-interval", "30", "--status-allow",
                                     "10.0.0.0/8,fd00::/8", "--status-port", "9101"]
    assert json.loads((out / "resolved.json").read_text())["status_port"] == 9101
    unit, out = ok(rendered, "status-off")
    assert wrapper_options(unit) == ["--probe-interval", "30", "--status-port", "0"]
    assert json.loads((out / "resolved.json").read_text())["status_port"] == 0
    _unit, out = ok(rendered, "defaults")
    assert json.loads((out / "resolved.json").read_text())["status_port"] == 8001


def test_each_instance_has_its_own_gpus_ports_and_state(rendered) -> None:
    unit, out = ok(rendered, "instances")
    argv = shlex.split(directive(unit, "ExecStart")[0])
    assert argv[argv.index("--status-port") + 1] == "8101"
    assert argv[argv.index("--port") + 1] == "8001"
    assert "CUDA_VISIBLE_DEVICES=4,5,6,7" in directive(unit, "Environment")
    assert "HOME=/var/lib/vllm/1" in directive(unit, "Environment")
    assert directive(unit, "WorkingDirectory") == ["/var/lib/vllm/1"]
    assert directive(unit, "Description")[0].endswith(", instance 1)")
    first, _out = ok(rendered, "instances-0")
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3" in directive(first, "Environment")
    resolved = json.loads((out / "resolved.json").read_text())
    assert resolved["instance_count"] == 2
    assert [i["unit"] for i in resolved["instances"]] == ["vllm@0.service", "vllm@1.service"]
    assert resolved["unit"] == "vllm@0.service" and resolved["port"] == 8000


def test_one_instance_is_the_plain_unit_on_every_gpu(rendered) -> None:
    unit, out = ok(rendered, "defaults")
    assert not [e for e in directive(unit, "Environment") if "VISIBLE_DEVICES" in e]
    assert directive(unit, "WorkingDirectory") == ["/var/lib/vllm"]
    resolved = json.loads((out / "resolved.json").read_text())
    assert [i["unit"] for i in resolved["instances"]] == ["vllm.service"]


def test_compiled_kernels_are_cached_where_the_unit_may_write_across_restarts(rendered) -> None:
    """torch.compile's kernels (vLLM V1's sampler) go to the cache directory, not the private
    /tmp a restart empties: a restart's warm-up finds them."""
    unit, _out = ok(rendered, "defaults")
    env = dict(e.split("=", 1) for e in directive(unit, "Environment"))
    cache = env["TORCHINDUCTOR_CACHE_DIR"]
    assert cache == "/var/cache/vllm/torchinductor"
    writable = directive(unit, "ReadWritePaths")[0].split()
    assert any(cache.startswith(path.rstrip("/") + "/") for path in writable), writable


def test_the_sandbox_lets_the_wrapper_listen(rendered) -> None:
    """The status port is a TCP listener of the wrapper (user vllm, a port above 1023): the
    unit must keep IPv4/IPv6 sockets and must not deny addresses, binds or the network."""
    unit, _out = ok(rendered, "defaults")
    families = directive(unit, "RestrictAddressFamilies")[0].split()
    assert {"AF_INET", "AF_INET6"} <= set(families) and not families[0].startswith("~")
    for key in ("IPAddressDeny", "IPAddressAllow", "SocketBindDeny", "SocketBindAllow",
                "PrivateNetwork"):
        assert directive(unit, key) == [], key
    assert directive(unit, "User") == ["vllm"]  # no capability needed above port 1023


# --- secrets in vllm_service_environment: the 0600 environment file, never the 0644 unit ------

SECRETS = {"HF_TOKEN": "hf_" + "x" * 30, "S3_SECRET_ACCESS_KEY": 'a"b\\c$d`e f'}


def env_file(path: Path) -> dict[str, str]:
    """NAME=value lines of an env file, read back as systemd's parser does for double-quoted
    values (a backslash before one of the four characters it escapes is dropped)."""
    entries = {}
    for line in path.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        name, value = line.split("=", 1)
        if value.startswith('"'):
            value = re.sub(r'\\(["\\`$])', r"\1", value[1:-1])
        entries[name] = value
    return entries


def test_secret_named_entries_go_to_the_env_file_not_the_unit(tmp_path: Path) -> None:
    run, unit = render(tmp_path, "-vvv", vllm_service_environment={**SECRETS, "ODD": "a b"})
    assert run.returncode == 0, run.stdout[-2000:]
    env = env_file(tmp_path / "vllm.env")
    assert env == {"VLLM_API_KEY": "unit-test-key-0123456789", **SECRETS}
    assert '"ODD=a b"' in directive(unit, "Environment")  # the others stay in the unit
    for name, value in SECRETS.items():
        assert name not in unit and value not in unit
        assert value not in run.stdout + run.stderr  # nor in the play's output at -vvv


# --- attention: role vllm's fact vllm_attention in the server's environment --------------------


def triton_lines(unit: str) -> list[str]:
    return [e for e in directive(unit, "Environment") if e.startswith(TRITON + "=")]


def test_ck_flash_attention_turns_triton_off_in_the_unit(rendered) -> None:
    unit, _out = ok(rendered, "ck")
    assert triton_lines(unit) == [f"{TRITON}=0"]
    assert "HF_HUB_OFFLINE=1" in directive(unit, "Environment")  # the base stays


def test_without_ck_flash_attention_the_unit_leaves_the_variable_to_vllm(rendered) -> None:
    unit, _out = ok(rendered, "no-ck")
    assert triton_lines(unit) == []


def test_an_entry_that_agrees_with_ck_is_kept(rendered) -> None:
    # vLLM reads a YAML false ("False" in the unit) as false, as it reads 0
    unit, _out = ok(rendered, "ck-agrees")
    assert triton_lines(unit) == [f"{TRITON}=False"]


@pytest.mark.parametrize("value", ["1", "TRUE"])
def test_an_entry_that_forces_triton_over_ck_is_refused(rendered, value: object) -> None:
    case, unit, _out = rendered[f"ck-forced-{value}"]
    assert case.failed
    assert f"vllm_service_environment sets {TRITON}={value}" in case.output
    assert "vllm_source_ck_flash_attention" in case.output
    assert unit == ""


def test_without_ck_the_users_triton_choice_stands(rendered) -> None:
    unit, _out = ok(rendered, "no-ck-triton")
    assert triton_lines(unit) == [f"{TRITON}=1"]


@pytest.mark.parametrize(
    ("n", "needle"), [(n, needle) for n, (_vars, needle) in enumerate(BAD_INPUT)]
)
def test_bad_input_fails_naming_the_variable(rendered, n: int, needle: str) -> None:
    case, unit, _out = rendered[f"bad{n}"]
    assert case.failed
    assert needle in case.output
    assert unit == ""


# --- the stack's vllm.service block (files/stacks.yml) ---------------------------------------


def server_flags(unit: str) -> list[str]:
    argv = shlex.split(directive(unit, "ExecStart")[0])
    return argv[argv.index("/srv/models/my model") + 1 :]


def flag_value(unit: str, flag: str) -> str:
    flags = server_flags(unit)
    return flags[flags.index(flag) + 1]


def test_a_stack_without_a_service_block_renders_the_same_unit(rendered) -> None:
    """rocm-6.2.1 (the default) and cpu have no vllm.service: no capability, same unit."""
    default, _out = ok(rendered, "defaults")
    cpu, _out = ok(rendered, "cpu-stack")
    assert cpu == default
    assert directive(default, "CapabilityBoundingSet") == [""]
    assert directive(default, "AmbientCapabilities") == [""]


def test_rocm_7_2_1_keeps_ptrace_for_custom_all_reduce(rendered) -> None:
    unit, out = ok(rendered, "rocm7")
    assert directive(unit, "CapabilityBoundingSet") == ["CAP_SYS_PTRACE"]
    assert directive(unit, "AmbientCapabilities") == ["CAP_SYS_PTRACE"]
    assert directive(unit, "NoNewPrivileges") == ["yes"]
    assert "--enforce-eager" in server_flags(unit)
    assert flag_value(unit, "--gpu-memory-utilization") == "0.9"
    # only the two capability lines differ from a stack without a service block
    default, _out = ok(rendered, "defaults")
    changed = [a for a, b in zip(unit.splitlines(), default.splitlines(), strict=True) if a != b]
    assert changed == ["CapabilityBoundingSet=CAP_SYS_PTRACE", "AmbientCapabilities=CAP_SYS_PTRACE"]
    resolved = json.loads((out / "resolved.json").read_text())
    assert resolved["flags"]["enforce-eager"] is True
    assert resolved["flags"]["gpu-memory-utilization"] == 0.9


def test_rocm_7_2_1_forces_eager_mode_and_caps_memory_when_the_flags_do_not_say(rendered) -> None:
    unit, out = ok(rendered, "rocm7-unset")
    assert "--enforce-eager" in server_flags(unit)
    assert flag_value(unit, "--gpu-memory-utilization") == "0.9"
    resolved = json.loads((out / "resolved.json").read_text())
    assert resolved["flags"] == {"enforce-eager": True, "gpu-memory-utilization": 0.9,
                                 "tensor-parallel-size": 8}
    assert resolved["argv"] == server_flags(unit)


def test_a_lower_gpu_memory_utilization_is_kept(rendered) -> None:
    unit, _out = ok(rendered, "rocm7-lower")
    assert flag_value(unit, "--gpu-memory-utilization") == "0.85"


def refused(rendered, name: str) -> str:
    """The case failed and rendered no unit: its output on one line."""
    case, unit, _out = rendered[name]
    assert case.failed and unit == ""
    return " ".join(case.output.split())


def test_gpu_memory_utilization_above_the_stack_max_fails(rendered) -> None:
    assert ("vllm_service_flags (with vllm_service_flags_extra) sets gpu-memory-utilization 0.95,"
            " above the 0.9 stack rocm-7.2.1 allows") in refused(rendered, "rocm7-over")
    # a stack without the limit takes it
    unit, _out = ok(rendered, "cpu-over")
    assert flag_value(unit, "--gpu-memory-utilization") == "0.95"


def test_graph_capture_on_rocm_7_2_1_fails(rendered) -> None:
    assert ("vllm_service_flags (with vllm_service_flags_extra) sets enforce-eager False, but"
            " stack rocm-7.2.1 needs enforce-eager True") in refused(rendered, "rocm7-graphs")
