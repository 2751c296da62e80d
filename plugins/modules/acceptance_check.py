#!/usr/bin/python
# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module: one acceptance check of a vLLM node (thin; logic in module_utils/acceptance.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: acceptance_check
short_description: Run one acceptance check of a vLLM node and return its result
version_added: "0.2.0"
description:
  - C(gpu_matmul) - per GPU a float32 matmul on device C(cuda) (ROCm's HIP device in PyTorch),
    checked against a float64 CPU reference of the same inputs, in the node's venv.
  - C(vllm_platform) - vLLM's own C(current_platform) and the attention backend its selector
    picks for the model's head size and dtype, in the node's venv; fails when the platform is
    not the stack's device. On ROCm also the attention implementation that runs
    (C(attention_impl) - C(triton), C(ck) or C(naive) for vLLM 0.6's C(ROCM_FLASH) backend, read
    from vLLM's own C(VLLM_USE_TRITON_FLASH_ATTN) and whether C(flash_attn) imports; elsewhere
    the backend's name), with the attention variables of the installed I(service) unit when
    there is one; fails when I(expected_attention=ck) and another implementation would run.
  - C(gpu_health) - temperatures, ECC counts and XGMI links read through the amdsmi Python
    binding in the venv, against the thresholds.
  - C(serve) - one completion from the node's model, through the service's API when its unit
    is active (an activating unit is waited for, up to I(activating_timeout)), or from a
    short-lived server on 127.0.0.1 when the node has no such unit. A failed, restarting,
    stopped or masked unit fails the check; no second server is started on its GPUs. Over
    C(https://) (a I(base_url) of that scheme, or a temporary server whose I(server_args) carry
    C(--ssl-certfile)) the server is verified with I(ca_path) and I(client_cert) is presented
    when it requires a client certificate.
  - C(collectives) - all-reduce and all-to-all across the node's GPUs, one process per GPU
    through torch.distributed (RCCL), timed per size; bus bandwidth as rccl-tests defines it, at
    least I(allreduce_min_busbw) at I(allreduce_bytes) and I(alltoall_min_busbw) at
    I(alltoall_bytes), every element of every result checked. I(tier=burnin) then repeats both
    at the larger size for I(burnin_seconds) and judges every run.
  - C(firmware) - the MEC firmware version of every GPU (C(rocm-smi --showfw)); below
    I(mec_minimum) the service's I(environment) must set C(HSA_NO_SCRATCH_RECLAIM=1).
  - C(kernel_log) - the kernel's messages since I(since) (C(journalctl -k)) against ROCm/cvs'
    failure patterns (GPU reset, page faults, driver and RAS errors); needs a user that may read
    the kernel log (the playbook runs it as root).
  - The unit's state is read with C(systemctl show), which needs no root, so the module can
    run as the service's user (the playbook becomes it - its groups open C(/dev/kfd)).
  - On a stack without GPU (I(device=cpu)) C(gpu_matmul), C(gpu_health), C(collectives),
    C(firmware) and C(kernel_log) are skipped with the reason. The module never fails for a
    failed check; it returns the result (status ok, failed, skipped or error) and the playbook
    gates on all of them.
options:
  check:
    description: The check to run.
    type: str
    required: true
    choices: [gpu_matmul, vllm_platform, gpu_health, serve, collectives, firmware, kernel_log]
  device:
    description: The stack's device (C(rocm) when the stack has a C(rocm) section).
    type: str
    required: true
    choices: [rocm, cpu]
  stack:
    description: The stack's name, for the messages.
    type: str
    default: ""
  python:
    description: >-
      The venv interpreter that has torch, vLLM and the amdsmi binding (role acceptance passes
      role vllm_service's published C(vllm_service_resolved.python)).
    type: path
    required: true
  environment:
    description:
      - Environment of the probes and of a temporary server (the service's). Values of
        variables named like secrets (C(*TOKEN*), C(*KEY*), C(*SECRET*), C(*PASSWORD*)) are
        masked in the result.
    type: dict
    default: {}
  expected_gpus:
    description: GPUs the node must show (0 - any number above zero).
    type: int
    default: 0
  matmul_size:
    description: Rows and columns of the square matrices.
    type: int
    default: 1024
  matmul_tolerance:
    description: Largest accepted max abs error relative to the largest reference element.
    type: float
    default: 0.001
  thresholds:
    description:
      - Health limits - max_hotspot_c, max_vram_c, max_ecc_correctable,
        max_ecc_uncorrectable, xgmi_required (every GPU pair XGMI-linked).
    type: dict
    default: {}
  allreduce_bytes:
    description: C(collectives) - the message size of the all-reduce bar, in bytes.
    type: int
    default: 8589934592
  allreduce_min_busbw:
    description: C(collectives) - least all-reduce bus bandwidth in GB/s at I(allreduce_bytes).
    type: float
    default: 304
  alltoall_bytes:
    description: C(collectives) - the message size of the all-to-all bar, in bytes.
    type: int
    default: 8589934592
  alltoall_min_busbw:
    description:
      - C(collectives) - least all-to-all bus bandwidth in GB/s at I(alltoall_bytes) (the
        bandwidth each GPU receives from the others).
    type: float
    default: 320
  tier:
    description:
      - C(collectives) - C(quick) measures once per size; C(burnin) then repeats both collectives
        for I(burnin_seconds).
    type: str
    default: quick
    choices: [quick, burnin]
  burnin_seconds:
    description: C(collectives) - duration of the burn-in tier.
    type: float
    default: 3600
  collective_iters:
    description: C(collectives) - timed iterations per size (rccl-tests' default is 20).
    type: int
    default: 20
  collective_timeout:
    description: C(collectives) - seconds the measurement may take, on top of the burn-in.
    type: float
    default: 900
  mec_minimum:
    description: C(firmware) - the MEC firmware version from which RCCL needs no workaround.
    type: int
    default: 177
  rocm_smi:
    description: C(firmware) - the rocm-smi program.
    type: path
    default: /opt/rocm/bin/rocm-smi
  since:
    description: C(kernel_log) - start of the window, in seconds since the epoch (node's clock).
    type: str
    default: "0"
  attention_environment:
    description:
      - C(vllm_platform) - the environment that selects the installed attention (role vllm's
        fact C(vllm_attention)), under I(environment), as role vllm_service gives it the server.
    type: dict
    default: {}
  expected_attention:
    description:
      - C(ck) when role vllm installed CK flash-attention (its fact C(vllm_attention)); C(default)
        accepts vLLM's own choice.
    type: str
    default: default
    choices: [default, ck]
  model_path:
    description: The model directory (head size and dtype for the selector; temporary server).
    type: str
    default: ""
  dtype:
    description: The served dtype (C(auto) - the model's torch_dtype).
    type: str
    default: auto
  kv_cache_dtype:
    description: The served KV-cache dtype.
    type: str
    default: auto
  serve_mode:
    description:
      - C(auto) - the service when its unit exists (waited for while activating, a failure
        when it is failed, restarting or stopped), a temporary server only when the node has
        no unit by that name (systemd's LoadState C(not-found)).
      - C(service) - the service only (no unit is a failure).
      - C(temporary) - a temporary server, whatever the unit's state.
    type: str
    default: auto
    choices: [auto, service, temporary]
  service:
    description:
      - The systemd service name (without .service). C(vllm_platform) reads the attention
        variables of its unit, C(serve) its state. Required by those two checks (role
        acceptance passes the published C(vllm_service_resolved.name)).
    type: str
  activating_timeout:
    description:
      - Seconds to wait at most for an activating unit (its model loading) to become active;
        still activating after it, the check fails naming the state. 0 does not wait.
      - The playbook passes the unit's TimeoutStartSec (C(vllm_service_timeout_start_sec)),
        after which systemd ends the start itself.
    type: float
    default: 3600
  poll_interval:
    description: Seconds between two reads of an activating unit's state.
    type: float
    default: 5
  base_url:
    description: >-
      The service's URL as seen from the node, C(http://) or C(https://). Required by C(serve)
      (role acceptance passes the published C(vllm_service_resolved.url)).
    type: str
  api_key:
    description: The service's API key (never logged, never in argv or the result).
    type: str
    default: ""
  model:
    description: The served model name (empty - the first one /v1/models lists).
    type: str
    default: ""
  prompt:
    description: The completion's prompt.
    type: str
    default: The capital of France is
  max_tokens:
    description: Tokens to generate.
    type: int
    default: 8
  timeout:
    description: Seconds per API request.
    type: float
    default: 120
  server_args:
    description: Extra arguments of a temporary server (the service's vLLM flags).
    type: list
    elements: str
    default: []
  startup_timeout:
    description: Seconds a temporary server may take to answer /health.
    type: float
    default: 900
extends_documentation_fragment:
  - instinct.vllm.attributes
  - instinct.vllm.tls_client
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
author:
  - instinct.vllm maintainers (@instinct-vllm)
"""

EXAMPLES = r"""
- name: GPU matmul
  instinct.vllm.acceptance_check:
    check: gpu_matmul
    device: rocm
    python: "{{ vllm_service_resolved.python }}"
  register: matmul

- name: One completion from a service that serves only mutual TLS
  instinct.vllm.acceptance_check:
    check: serve
    device: rocm
    python: "{{ vllm_service_resolved.python }}"
    service: "{{ vllm_service_resolved.name }}"
    base_url: "{{ vllm_service_resolved.url }}"
    api_key: "{{ vllm_service_api_key }}"
    ca_path: /etc/vllm/tls/ca.crt
    client_cert: /etc/vllm/tls/node.crt
    client_key: /etc/vllm/tls/node.key
  register: serve
"""

RETURN = r"""
result:
  description:
    - name, status (ok, failed, skipped, error), reason, detail, seconds.
    - detail.user is the user the check ran as (the playbook becomes the service's user).
  type: dict
  returned: always
"""

import os  # noqa: E402
import pwd  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.instinct.vllm.plugins.module_utils.acceptance import (  # noqa: E402
    CHECKS,
    TIERS,
    TLS_REQUIRED_TOGETHER,
    TLS_SPEC,
    Bar,
    CollectiveSpec,
    NodeSpec,
    ServeSpec,
    Thresholds,
    TlsClient,
    TlsConfigError,
    collectives,
    firmware,
    gpu_health,
    gpu_matmul,
    kernel_log,
    redact,
    serve_check,
    vllm_platform,
)

THRESHOLD_KEYS = set(Thresholds.__dataclass_fields__)
SECRET_NAMES = ("TOKEN", "KEY", "SECRET", "PASSWORD")


def secret_values(env: dict[str, str]) -> list[str]:
    """Values of environment variables named like secrets (HF_TOKEN, VLLM_API_KEY...)."""
    return [v for k, v in env.items() if any(s in k.upper() for s in SECRET_NAMES)]


def collective_spec(p: dict) -> CollectiveSpec:
    """The collective check's bars and tier from the module's parameters."""
    return CollectiveSpec(
        allreduce=Bar("all_reduce", p["allreduce_bytes"], p["allreduce_min_busbw"]),
        alltoall=Bar("all_to_all", p["alltoall_bytes"], p["alltoall_min_busbw"]),
        tier=p["tier"],
        burnin_seconds=p["burnin_seconds"],
        iters=p["collective_iters"],
        timeout=p["collective_timeout"],
    )


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "check": {"type": "str", "required": True, "choices": list(CHECKS)},
            "device": {"type": "str", "required": True, "choices": ["rocm", "cpu"]},
            "stack": {"type": "str", "default": ""},
            "python": {"type": "path", "required": True},
            "environment": {"type": "dict", "default": {}},
            "expected_gpus": {"type": "int", "default": 0},
            "matmul_size": {"type": "int", "default": 1024},
            "matmul_tolerance": {"type": "float", "default": 0.001},
            "thresholds": {"type": "dict", "default": {}},
            "allreduce_bytes": {"type": "int", "default": 8589934592},
            "allreduce_min_busbw": {"type": "float", "default": 304.0},
            "alltoall_bytes": {"type": "int", "default": 8589934592},
            "alltoall_min_busbw": {"type": "float", "default": 320.0},
            "tier": {"type": "str", "default": "quick", "choices": list(TIERS)},
            "burnin_seconds": {"type": "float", "default": 3600.0},
            "collective_iters": {"type": "int", "default": 20},
            "collective_timeout": {"type": "float", "default": 900.0},
            "mec_minimum": {"type": "int", "default": 177},
            "rocm_smi": {"type": "path", "default": "/opt/rocm/bin/rocm-smi"},
            "since": {"type": "str", "default": "0"},
            "attention_environment": {"type": "dict", "default": {}},
            "expected_attention": {
                "type": "str",
                "default": "default",
                "choices": ["default", "ck"],
            },
            "model_path": {"type": "str", "default": ""},
            "dtype": {"type": "str", "default": "auto"},
            "kv_cache_dtype": {"type": "str", "default": "auto"},
            "serve_mode": {
                "type": "str",
                "default": "auto",
                "choices": ["auto", "service", "temporary"],
            },
            "service": {"type": "str"},
            "base_url": {"type": "str"},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "model": {"type": "str", "default": ""},
            "prompt": {"type": "str", "default": "The capital of France is"},
            "max_tokens": {"type": "int", "default": 8, "no_log": False},
            "timeout": {"type": "float", "default": 120.0},
            "server_args": {"type": "list", "elements": "str", "default": []},
            "startup_timeout": {"type": "float", "default": 900.0},
            "activating_timeout": {"type": "float", "default": 3600.0},
            "poll_interval": {"type": "float", "default": 5.0},
            **TLS_SPEC,
        },
        required_together=TLS_REQUIRED_TOGETHER,
        required_if=[
            ("check", "serve", ["service", "base_url"]),
            ("check", "vllm_platform", ["service"]),
        ],
        supports_check_mode=True,
    )
    p = module.params
    unknown = set(p["thresholds"]) - THRESHOLD_KEYS
    if unknown:
        module.fail_json(
            msg=f"thresholds: unknown keys {sorted(unknown)} (known: {sorted(THRESHOLD_KEYS)})"
        )
    env = {str(k): str(v) for k, v in p["environment"].items()}

    def run(argv: list[str], stdin: str, extra: dict[str, str]) -> tuple[int, str, str]:
        try:
            rc, out, err = module.run_command(
                argv,
                data=stdin or None,
                environ_update=extra,
                binary_data=False,
                handle_exceptions=False,
            )
        except OSError as exc:  # the program is missing or not executable by this user
            return 127, "", f"{argv[0]}: {exc}"
        return rc, out, err

    node = NodeSpec(p["device"], p["python"], p["stack"], env, p["expected_gpus"])
    if p["check"] == "gpu_matmul":
        result = gpu_matmul(node, run, p["matmul_size"], p["matmul_tolerance"])
    elif p["check"] == "vllm_platform":
        result = vllm_platform(
            node,
            run,
            p["model_path"],
            p["dtype"],
            p["kv_cache_dtype"],
            expected_attention=p["expected_attention"],
            attention_env={str(k): str(v) for k, v in p["attention_environment"].items()},
            service=p["service"],
        )
    elif p["check"] == "gpu_health":
        result = gpu_health(node, run, Thresholds(**p["thresholds"]))
    elif p["check"] == "collectives":
        result = collectives(node, run, collective_spec(p))
    elif p["check"] == "firmware":
        result = firmware(run, env, node.gpu_skip_reason, p["rocm_smi"], p["mec_minimum"])
    elif p["check"] == "kernel_log":
        result = kernel_log(run, p["since"], node.gpu_skip_reason)
    else:
        tls = TlsClient.from_params(p)
        try:
            tls.ssl_context()  # the files load, before the check
        except TlsConfigError as exc:
            module.fail_json(msg=str(exc))
        spec = ServeSpec(
            mode=p["serve_mode"],
            service=p["service"],
            base_url=p["base_url"],
            api_key=p["api_key"],
            model=p["model"],
            prompt=p["prompt"],
            max_tokens=p["max_tokens"],
            timeout=p["timeout"],
            python=p["python"],
            model_path=p["model_path"],
            server_args=p["server_args"],
            server_env=env,
            startup_timeout=p["startup_timeout"],
            activating_timeout=p["activating_timeout"],
            poll_interval=p["poll_interval"],
            tls=tls,
        )
        result = serve_check(spec, run, module.check_mode)
    out = redact(result.as_dict(), [p["api_key"], *secret_values(env)])
    out["detail"]["user"] = pwd.getpwuid(os.geteuid()).pw_name
    module.exit_json(
        changed=False, result=out, msg=f"{out['name']}: {out['status']}: {out['reason']}"
    )


if __name__ == "__main__":
    main()
