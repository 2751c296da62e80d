#!/usr/bin/python
# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module: check an OpenAI-compatible vLLM endpoint as a client would."""

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_endpoint_check
short_description: Check an OpenAI-compatible vLLM endpoint with the OpenAI Python SDK
description:
  - Runs client-side checks against a vLLM server - GET /health, /v1/models lists the model,
    a chat completion, a streamed chat completion read to its end, POST /tokenize, and 401
    without (and with a wrong) API key.
  - "Meant to run on the controller (C(delegate_to: localhost)) with an interpreter that has the
    C(openai) package."
  - Fails when any check fails; the message names each failed check and why.
  - Over C(https://) both the plain requests and the SDK verify the node with I(ca_path) and
    present I(client_cert) when the node requires a client certificate.
options:
  base_url:
    description: Server root, e.g. http://127.0.0.1:8000 or https://node-1:8000 (a trailing /v1
      is accepted).
    type: str
    required: true
  api_key:
    description: The server's API key.
    type: str
    required: true
  model:
    description: Model id that must be served; empty uses the first one /v1/models lists.
    type: str
    default: ""
  checks:
    description: Checks to run, in order.
    type: list
    elements: str
    default: [health, models, chat, chat_stream, tokenize, auth_required]
    choices: [health, models, chat, chat_stream, tokenize, auth_required]
  timeout:
    description: Seconds per request.
    type: float
    default: 60
  max_tokens:
    description: Tokens to generate in the chat checks.
    type: int
    default: 8
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
- name: Verify the endpoint from the controller
  instinct.vllm.vllm_endpoint_check:
    base_url: http://10.0.0.11:8000
    api_key: "{{ vllm_service_api_key }}"
    model: gpt-oss-120b
  delegate_to: localhost
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"

- name: Verify a node that serves only mutual TLS
  instinct.vllm.vllm_endpoint_check:
    base_url: https://node-1.example.com:8000
    api_key: "{{ vllm_service_api_key }}"
    ca_path: "{{ fleet_pki_resolved.ca }}"
    client_cert: "{{ fleet_pki_resolved.client_cert }}"
    client_key: "{{ fleet_pki_resolved.client_key }}"
  delegate_to: localhost
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
"""

RETURN = r"""
checks:
  description: One entry per check - name, ok, detail, seconds.
  type: list
  returned: always
model:
  description: The model id the checks used.
  type: str
  returned: when /v1/models answered
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.instinct.vllm.plugins.module_utils.endpoint_check import (  # noqa: E402
    ALL_CHECKS,
    TLS_REQUIRED_TOGETHER,
    TLS_SPEC,
    Endpoint,
    TlsClient,
    TlsConfigError,
    run_checks,
    summary,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "base_url": {"type": "str", "required": True},
            "api_key": {"type": "str", "required": True, "no_log": True},
            "model": {"type": "str", "default": ""},
            "checks": {"type": "list", "elements": "str", "default": list(ALL_CHECKS),
                       "choices": list(ALL_CHECKS)},
            "timeout": {"type": "float", "default": 60.0},
            "max_tokens": {"type": "int", "default": 8, "no_log": False},
            **TLS_SPEC,
        },
        required_together=TLS_REQUIRED_TOGETHER,
        supports_check_mode=True,
    )
    p = module.params
    tls = TlsClient.from_params(p)
    try:
        tls.ssl_context()  # the files load, before any check
    except TlsConfigError as exc:
        module.fail_json(msg=str(exc), checks=[])
    ep = Endpoint(p["base_url"], p["api_key"], p["model"], p["timeout"], p["max_tokens"], tls)
    results = run_checks(ep, p["checks"])
    out = {
        "changed": False,
        "checks": [r.as_dict() for r in results],
        "model": ep.model or (ep._models[0] if ep._models else ""),
        "msg": summary(results),
    }
    if all(r.ok for r in results):
        module.exit_json(**out)
    module.fail_json(**out)


if __name__ == "__main__":
    main()
