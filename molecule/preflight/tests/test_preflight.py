"""Bad inputs fail in preflight, before anything that would change the host, and change nothing.

One ansible-playbook run against this sandbox host under several inventory names (the same
container, each name with its own variables): the role preflight, then a task that stands for
the later roles. Good cases must reach that task; bad cases must fail in preflight with a
message naming the variable/fact and the fix. The host's files are compared before and after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CONTAINER = "sandbox-preflight"
JOURNAL_UNITS: list[str] = []

COMMON = {
    "ansible_connection": "sandbox_podman",
    "ansible_host": CONTAINER,
    "ansible_python_interpreter": "/usr/bin/python3",
    "preflight_min_memory_gib": 1,
    "preflight_disk_requirements": [{"path": "/opt/vllm", "min_free_gib": 1}],
}
STUBS = {"preflight_gpu_search_paths": ["/opt/preflight-stubs/bin"]}
# rocm-6.2.1 moved to the sandbox's Debian 12 (data, as any site would add a stack); the
# sandbox's kernel is the machine's, not an Ubuntu one: preflight-test names no kernel ABIs,
# preflight-kernel keeps rocm-6.2.1's (6.8.0-31 to 6.8.0-41)
DEBIAN_12 = [
    {"distribution": "Debian", "version": "12", "codename": "bookworm", "kernel_flavours": ["any"]}
]
TEST_STACK = {
    "instinct_vllm_stack": "preflight-test",
    "instinct_vllm_stacks_extra": {
        "preflight-test": {
            "extends": "rocm-6.2.1",
            "description": "rocm-6.2.1 on the Debian 12 sandbox",
            "os": DEBIAN_12,
            "rocm": {"kernel_abi": None},
        }
    },
}
KERNEL_STACK = {
    "instinct_vllm_stack": "preflight-kernel",
    "instinct_vllm_stacks_extra": {
        "preflight-kernel": {
            "extends": "rocm-6.2.1",
            "description": "rocm-6.2.1 on the Debian 12 sandbox, with its kernel ABIs",
            "os": DEBIAN_12,
        }
    },
    "preflight_tensor_parallel_size": 8,
}

SLIDING = {
    "preflight_tensor_parallel_size": 8,
    "preflight_model_config_file": "/opt/preflight-stubs/share/mistral-config.json",
}

CASES: dict[str, dict] = {
    "good_cpu": {"instinct_vllm_stack": "cpu"},
    "good_gpu_stubs": {
        **TEST_STACK,
        **STUBS,
        "preflight_tensor_parallel_size": 8,
        "preflight_model_architecture": "LlamaForCausalLM",
        "preflight_model_num_attention_heads": 64,
    },
    "unknown_stack": {"instinct_vllm_stack": "rocm-9.9"},
    "wrong_os": {"instinct_vllm_stack": "rocm-6.2.1", **STUBS},
    "tp_not_dividing": {**TEST_STACK, **STUBS, "preflight_tensor_parallel_size": 3},
    "gpt_oss_on_rocm621": {
        "instinct_vllm_stack": "rocm-6.2.1",
        **STUBS,
        "preflight_model_architecture": "GptOssForCausalLM",
    },
    "malformed_tp": {"instinct_vllm_stack": "cpu", "preflight_tensor_parallel_size": "three"},
    # rocm-6.2.1's Triton flash-attention ignores sliding windows (files/stacks.yml
    # vllm.attention): the window is read from the model's config.json on the host
    "sliding_window_without_ck": {**TEST_STACK, **STUBS, **SLIDING},
    "sliding_window_with_ck": {
        **TEST_STACK,
        **STUBS,
        **SLIDING,
        "vllm_source_ck_flash_attention": True,
    },
    # CK flash-attention installed, but the service's environment turns Triton back on
    "sliding_window_ck_triton_forced": {
        **TEST_STACK,
        **STUBS,
        **SLIDING,
        "vllm_source_ck_flash_attention": True,
        "vllm_service_environment": {"VLLM_USE_TRITON_FLASH_ATTN": "1"},
    },
    # the sandbox kernel is outside rocm-6.2.1's kernel_abi (or has no Ubuntu ABI number):
    # refused by default
    "kernel_abi_fail": {**KERNEL_STACK, **STUBS},
    # a patched noble node: the kernel fact says 6.8.0-100-generic (pre_tasks below)
    "kernel_newer": {**KERNEL_STACK, **STUBS, "test_kernel_release": "6.8.0-100-generic"},
    "kernel_newer_warn": {
        **KERNEL_STACK,
        **STUBS,
        "test_kernel_release": "6.8.0-100-generic",
        "preflight_kernel_abi_policy": "warn",
    },
    "kernel_newer_pinned": {
        **KERNEL_STACK,
        **STUBS,
        "test_kernel_release": "6.8.0-100-generic",
        "rocm_kernel_pin": True,
    },
    "kernel_validated": {**KERNEL_STACK, **STUBS, "test_kernel_release": "6.8.0-41-generic"},
}

PLAYBOOK = [
    {
        "name": "Preflight, then what stands for the roles that change the host",
        "hosts": "all",
        "gather_facts": False,
        # a host that reports another kernel: its facts, with the kernel release replaced
        # (a cacheable set_fact updates ansible_facts)
        "pre_tasks": [
            {
                "name": "Gather the facts of a host that reports another kernel",
                "ansible.builtin.setup": {"gather_subset": ["min", "hardware"]},
                "when": "test_kernel_release is defined",
            },
            {
                "name": "Report the kernel release under test",
                "ansible.builtin.set_fact": {
                    "kernel": "{{ test_kernel_release }}",
                    "cacheable": True,
                },
                "when": "test_kernel_release is defined",
            },
        ],
        "roles": ["instinct.vllm.preflight"],
        "tasks": [
            {
                "name": "Later roles would start here",
                "ansible.builtin.debug": {
                    "msg": "{{ preflight_stack.name }}: {{ preflight_gpus.count }} GPU(s) "
                    "{{ preflight_gpus.archs | join(',') }}"
                },
            }
        ],
    }
]

# Where the later roles write (configuration, /opt, /srv, /usr/local, packages, homes); /root
# (Ansible's own temp files), /tmp and /run are left out.
SNAPSHOT = (
    "find /etc /opt /srv /usr/local /var/lib/dpkg /var/lib/apt /home -xdev "
    "-printf '%p %s %m %T@\\n' 2>/dev/null | sort"
)


def _snapshot(host) -> list[str]:
    return host.check_output(SNAPSHOT).splitlines()


@pytest.fixture(scope="module")
def run(host, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("preflight")
    inventory = {"all": {"vars": COMMON, "hosts": dict(CASES)}}
    (tmp / "inventory.json").write_text(json.dumps(inventory))
    playbook = tmp / "play.yml"
    playbook.write_text(json.dumps(PLAYBOOK))  # JSON is YAML
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"),
        ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
        ANSIBLE_CONNECTION_PLUGINS=str(ROOT / "molecule/shared/connection_plugins"),
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORKS="8",
        ANSIBLE_PIPELINING="True",
    )
    before = _snapshot(host)
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(tmp / "inventory.json"),
            str(playbook),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
        check=False,
    )
    after = _snapshot(host)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        pytest.fail(
            f"no JSON from ansible-playbook (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    results: dict[str, list[tuple[str, dict]]] = {name: [] for name in CASES}
    for task in report["plays"][0]["tasks"]:
        for name, result in task["hosts"].items():
            results[name].append((task["task"]["name"], result))
    return {
        "rc": proc.returncode,
        "results": results,
        "before": before,
        "after": after,
        "stderr": proc.stderr,
    }


def _failure(run, case: str) -> tuple[str, str]:
    failed = [(task, r) for task, r in run["results"][case] if r.get("failed")]
    assert failed, f"{case} did not fail: {[task for task, _result in run['results'][case]]}"
    task, result = failed[0]
    return task, str(result.get("msg", ""))


def _reached_later_roles(run, case: str) -> bool:
    return any(task == "Later roles would start here" for task, _result in run["results"][case])


def test_nothing_changed_on_the_host(run):
    if run["before"] != run["after"]:
        changed = sorted(set(run["before"]) ^ set(run["after"]))
        pytest.fail("the host changed:\n" + "\n".join(changed[:50]))


def test_playbook_failed_overall(run):
    assert run["rc"] != 0  # bad cases fail the run


def test_good_cpu_passes(run):
    assert _reached_later_roles(run, "good_cpu")
    (msg,) = [
        r["msg"] for t, r in run["results"]["good_cpu"] if t == "Later roles would start here"
    ]
    assert msg == "cpu: 0 GPU(s) "


def test_sliding_window_model_passes_with_ck_flash_attention(run):
    assert _reached_later_roles(run, "sliding_window_with_ck")


@pytest.mark.parametrize("case", ["kernel_newer_warn", "kernel_newer_pinned", "kernel_validated"])
def test_kernel_ways_out_pass(run, case):
    """A validated kernel passes; a newer one passes with preflight_kernel_abi_policy: warn, or
    when role rocm will install and boot the stack's kernel (rocm_kernel_pin)."""
    assert _reached_later_roles(run, case)


def test_good_gpu_stack_reads_the_stub_tools(run):
    assert _reached_later_roles(run, "good_gpu_stubs")
    (msg,) = [
        r["msg"] for t, r in run["results"]["good_gpu_stubs"] if t == "Later roles would start here"
    ]
    assert msg == "preflight-test: 8 GPU(s) gfx942"


@pytest.mark.parametrize(
    ("case", "fragments"),
    [
        (
            "unknown_stack",
            [
                "instinct_vllm_stack: unknown stack 'rocm-9.9'",
                "known stacks: cpu, rocm-6.2.1, rocm-7.2.1",
            ],
        ),
        (
            "wrong_os",
            [
                "is not supported by stack 'rocm-6.2.1' (supported: Ubuntu 24.04)",
                "set instinct_vllm_stack to a stack that supports it (cpu, sandbox-rocm-6.2.1, "
                "sandbox-rocm-7.2.3)",
            ],
        ),
        (
            "tp_not_dividing",
            [
                "preflight_tensor_parallel_size=3 does not divide the 8 GPU(s)",
                "use one of 1, 2, 4, 8",
            ],
        ),
        (
            "gpt_oss_on_rocm621",
            [
                "GptOssForCausalLM (preflight_model_architecture) is not served "
                "by stack 'rocm-6.2.1'",
                "one of: rocm-7.2.1",
                "is not supported by stack 'rocm-6.2.1'",
            ],
        ),
        ("malformed_tp", ["preflight_tensor_parallel_size", "int"]),
        (
            "sliding_window_without_ck",
            [
                "sliding window of 4096 tokens (config.json sliding_window",
                "stack 'preflight-test' serves it with an attention backend that ignores",
                "set vllm_source_ck_flash_attention: true",
                "here vllm_source_ck_flash_attention is false",
            ],
        ),
        (
            "sliding_window_ck_triton_forced",
            [
                "sliding window of 4096 tokens (config.json sliding_window",
                "here vllm_service_environment sets VLLM_USE_TRITON_FLASH_ATTN=1",
                "leave VLLM_USE_TRITON_FLASH_ATTN out of vllm_service_environment",
            ],
        ),
        (
            "kernel_abi_fail",
            [
                "(ansible_facts.kernel)",
                "stack 'preflight-kernel' rocm.kernel_abi (6.8.0-31 to 6.8.0-41)",
                "preflight_kernel_abi_policy: warn (now fail)",
            ],
        ),
        (
            "kernel_newer",
            [
                "running kernel '6.8.0-100-generic' (ansible_facts.kernel) is outside stack "
                "'preflight-kernel' rocm.kernel_abi (6.8.0-31 to 6.8.0-41)",
                "docs-6.2.1/reference/system-requirements",
                "set rocm_kernel_pin: true and role rocm installs the stack's kernel 6.8.0-41",
                "preflight_kernel_abi_policy: warn (now fail)",
            ],
        ),
    ],
)
def test_bad_input_fails_in_preflight(run, case, fragments):
    task, msg = _failure(run, case)
    assert not _reached_later_roles(run, case)
    assert (
        task.startswith(
            (
                "instinct.vllm.preflight",
                "instinct.vllm.stack : Resolve the stack",  # preflight's dependency
                "Resolve the stack",
                "Fail on any problem",
                "Validating arguments",
            )
        )
        or "preflight" in task
    ), task
    for fragment in fragments:
        assert fragment in msg, f"{case}: {fragment!r} not in {msg!r}"
