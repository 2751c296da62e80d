#!/usr/bin/python
# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module: the accuracy fingerprint of a vLLM endpoint against a reference (thin; the logic is in
module_utils/fingerprint.py and module_utils/_fingerprint/)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fingerprint
short_description: Fingerprint an endpoint's answers and compare them with a reference
version_added: "0.2.0"
description:
  - Sends the fixed I(prompts) to an OpenAI-compatible vLLM endpoint, greedily (temperature 0).
    For each prompt it takes the greedy continuation (chat prompts through
    C(/v1/chat/completions)) and the teacher-forced log-probabilities of a reference's tokens
    (C(/v1/completions) with the token ids and C(prompt_logprobs), which vLLM 0.6.6 and later
    answer).
  - "References: I(reference_model_path) computes one with transformers on CPU from the same
    checkpoint (the module's interpreter needs torch and transformers, e.g. the node's vLLM
    venv); it is refused, naming the model's size and the host's available RAM, when the model
    does not fit. I(baseline) is a fingerprint recorded earlier (the fleet baseline)."
  - Each reference gives a verdict - per prompt token agreement, max and mean |delta logprob|,
    the greedy text - within the tolerance of I(dtype). Fails when a verdict fails, unless
    I(fail_on_mismatch=false). Without any reference it records the endpoint's own fingerprint.
  - "Consensus, during a rollout: with I(consensus_probe) the node also returns its C(probe) - its
    own greedy continuations teacher-forced on it, with what its running release claims (the
    I(unit_file): served name, the I(numerics_flags), the versions of the stack's packages in its
    venv). Run on a node not changed yet with I(consensus_of) set to that probe, the module
    scores the probe's tokens on that node's endpoint (found in its I(unit_file)) and returns
    the verdict C(consensus), that node being the reference - or C(skipped) with the reason when
    the two claim different answers (served name, numerics flags or stack)."
  - Over C(https://) the node is verified with I(ca_path) and I(client_cert) is presented when
    the node requires a client certificate; the URL read from I(unit_file) is C(https://) when
    the service has a certificate (C(--ssl-certfile)).
  - Reads only; check mode runs the same requests (a I(reference_cache) is then not written).
options:
  base_url:
    description: Server root, e.g. http://127.0.0.1:8000 (a trailing /v1 is accepted). Empty -
      the URL of the service in I(unit_file) (loopback when it listens on every address,
      C(https://) when it has a certificate).
    type: str
    default: ""
  api_key:
    description: The server's API key (empty sends none).
    type: str
    default: ""
  model:
    description: The served model name. Empty - the served name in I(unit_file).
    type: str
    default: ""
  prompts:
    description: The prompt list - the C(prompts) of C(files/fingerprint/prompts.yml) (id, kind
      C(completion) with C(prompt), or kind C(chat) with C(messages)).
    type: list
    elements: dict
    required: true
  dtype:
    description: The served dtype; selects the tolerance (C(float32), C(float16), C(bfloat16), or
      a key of I(tolerances)).
    type: str
    default: bfloat16
  tolerances:
    description: Per dtype, values merged over the defaults - C(max_abs), C(mean_abs) (|delta
      logprob| in nats), C(min_agreement), C(max_greedy_mismatch) (share of prompts), C(tie)
      (reference margins below it are not counted for agreement). See docs/fingerprint.md.
    type: dict
    default: {}
  reference_model_path:
    description: Checkpoint directory for the transformers reference (on the module's host).
    type: path
  reference_cache:
    description: JSON file keeping the transformers reference; reused when it was taken with the
      same prompts, I(max_tokens), I(window) and checkpoint, written otherwise.
    type: path
  baseline:
    description: A recorded fingerprint (this module's C(fingerprint)) to compare against.
    type: dict
  max_tokens:
    description: Tokens of each greedy continuation.
    type: int
    default: 16
  window:
    description: Prompt tokens scored before the continuation (the rest of the prompt is context).
    type: int
    default: 32
  meta:
    description: Kept in the fingerprint's C(meta), e.g. model revision, stack, numerics flags.
    type: dict
    default: {}
  timeout:
    description: Seconds per request.
    type: float
    default: 120
  fail_on_mismatch:
    description: Fail when a verdict fails (otherwise return it).
    type: bool
    default: true
  unit_file:
    description: The vLLM unit of the module's host (the release it runs); what it claims goes
      into the fingerprint's C(meta.claims) and, with I(consensus_of), gives the endpoint.
    type: path
  numerics_flags:
    description: The server flags that change the answers, compared for consensus.
    type: list
    elements: str
    default: [dtype, kv-cache-dtype, quantization, tensor-parallel-size, pipeline-parallel-size,
              enforce-eager, calculate-kv-scales]
  consensus_probe:
    description: Also return RV(probe), the tokens the nodes not changed yet score (needs
      I(unit_file)).
    type: bool
    default: false
  consensus_of:
    description: A changed node's RV(probe) - score it here and return RV(consensus) (needs
      I(unit_file)); no other reference is then taken.
    type: dict
  reference_only:
    description: Only take the transformers reference into I(reference_cache) (both needed) and
      return; no endpoint is asked and no verdict given. Role rollout runs it while the node
      still serves its last release, so the gate after the switch reads the reference from the
      cache instead of computing it while the node is out of rotation.
    type: bool
    default: false
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
- name: Fingerprint the node against transformers on CPU (run with the node's vLLM venv)
  instinct.vllm.fingerprint:
    base_url: http://127.0.0.1:8000
    api_key: "{{ vllm_service_api_key }}"
    model: demo
    dtype: float32
    prompts: "{{ (lookup('ansible.builtin.file', prompts_yml) | from_yaml).prompts }}"
    reference_model_path: /srv/models/demo
  vars:
    prompts_yml: "{{ playbook_dir }}/../files/fingerprint/prompts.yml"
    ansible_python_interpreter: /opt/vllm/venv/bin/python

- name: Compare with the fleet baseline only
  instinct.vllm.fingerprint:
    base_url: http://10.0.0.11:8000
    api_key: "{{ vllm_service_api_key }}"
    model: gpt-oss-120B
    prompts: "{{ fingerprint_prompts }}"
    baseline: "{{ lookup('ansible.builtin.file', baseline_file) | from_json }}"
  vars:
    baseline_file: /var/lib/instinct-vllm/fingerprints/0123abcd89ef4567.json

- name: A changed node's probe ...
  instinct.vllm.fingerprint:
    base_url: http://127.0.0.1:8000
    api_key: "{{ vllm_service_api_key }}"
    model: demo
    prompts: "{{ fingerprint_prompts }}"
    unit_file: /etc/systemd/system/vllm.service
    consensus_probe: true
  register: changed_node

- name: ... scored by a node not changed yet (its endpoint from its unit)
  instinct.vllm.fingerprint:
    api_key: "{{ vllm_service_api_key }}"
    prompts: "{{ fingerprint_prompts }}"
    unit_file: /etc/systemd/system/vllm.service
    consensus_of: "{{ changed_node.probe }}"
  delegate_to: node-2

- name: Fingerprint a node that serves only mutual TLS, from the controller
  instinct.vllm.fingerprint:
    base_url: https://node-1.example.com:8000
    api_key: "{{ vllm_service_api_key }}"
    model: demo
    prompts: "{{ fingerprint_prompts }}"
    ca_path: "{{ fleet_pki_resolved.ca }}"
    client_cert: "{{ fleet_pki_resolved.client_cert }}"
    client_key: "{{ fleet_pki_resolved.client_key }}"
  delegate_to: localhost
"""

RETURN = r"""
fingerprint:
  description: The endpoint's fingerprint (source, model, prompts_sha256, max_tokens, window,
    scored - per prompt the token ids, greedy text, logprobs, top ids, margins -, meta,
    left_out - the prompts longer than the server's max_model_len, with their token counts).
  type: dict
  returned: success
verdicts:
  description: Per reference (C(transformers), C(baseline)) - ok, summary, max_abs, mean_abs,
    agreement, greedy_mismatches, tolerance, prompts (per prompt the same and its problems),
    left_out (the prompts left out on both sides, longer than the server's max_model_len).
  type: dict
  returned: success
ok:
  description: Every verdict passed (true when there was no reference).
  type: bool
  returned: success
reference_seconds:
  description: Seconds the transformers reference took (0 when cached or not asked for).
  type: float
  returned: success
probe:
  description: With I(consensus_probe) - the node's own greedy continuations teacher-forced on it,
    a fingerprint whose C(meta.claims) says what its release claims.
  type: dict
  returned: success
consensus:
  description: With I(consensus_of) - status (C(ok), C(failed), C(skipped)), reason, claims (this
    node's), verdict (as in RV(verdicts), or null when skipped).
  type: dict
  returned: success
refused:
  description: The transformers reference was refused because the model does not fit the
    host's available RAM (I(msg) names the GiB needed and available); the module failed
    without fingerprinting. False for any other failure.
  type: bool
  returned: failure
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.instinct.vllm.plugins.module_utils.fingerprint import (  # noqa: E402
    TLS_REQUIRED_TOGETHER,
    TLS_SPEC,
    Endpoint,
    Refused,
    TlsClient,
    TlsConfigError,
    judge,
    parse_prompts,
    probe,
    probe_claims,
    read_claims,
    references,
    run,
    tolerance_for,
)

NUMERICS = ["dtype", "kv-cache-dtype", "quantization", "tensor-parallel-size",
            "pipeline-parallel-size", "enforce-eager", "calculate-kv-scales"]

SPEC = {
    "base_url": {"type": "str", "default": ""},
    "api_key": {"type": "str", "default": "", "no_log": True},
    "model": {"type": "str", "default": ""},
    "prompts": {"type": "list", "elements": "dict", "required": True},
    "dtype": {"type": "str", "default": "bfloat16"},
    "tolerances": {"type": "dict", "default": {}},
    "reference_model_path": {"type": "path"},
    "reference_cache": {"type": "path"},
    "baseline": {"type": "dict"},
    "max_tokens": {"type": "int", "default": 16, "no_log": False},
    "window": {"type": "int", "default": 32},
    "meta": {"type": "dict", "default": {}},
    "timeout": {"type": "float", "default": 120.0},
    "fail_on_mismatch": {"type": "bool", "default": True},
    "unit_file": {"type": "path"},
    "numerics_flags": {"type": "list", "elements": "str", "default": NUMERICS},
    "consensus_probe": {"type": "bool", "default": False},
    "consensus_of": {"type": "dict"},
    "reference_only": {"type": "bool", "default": False},
    **TLS_SPEC,
}


def _endpoint(module: AnsibleModule, claims: dict[str, str] | None) -> Endpoint:
    p = module.params
    base_url = p["base_url"] or (claims or {}).get("url", "")
    model = p["model"] or (claims or {}).get("served_model_name", "")
    if not base_url or not model:
        module.fail_json(msg="base_url and model are required without a unit_file", refused=False)
    tls = TlsClient.from_params(p)
    try:
        tls.ssl_context()  # the files load, before any request
    except TlsConfigError as exc:
        module.fail_json(msg=str(exc), refused=False)
    return Endpoint(base_url, p["api_key"], model, p["timeout"], tls)


def _claims(module: AnsibleModule) -> dict[str, str] | None:
    p = module.params
    if p["consensus_probe"] and not p["unit_file"]:
        module.fail_json(msg="consensus_probe needs unit_file", refused=False)
    return read_claims(p["unit_file"], p["numerics_flags"]).as_dict() if p["unit_file"] else None


def consensus(module: AnsibleModule) -> None:
    """Peer mode: score a changed node's probe here (consensus_of)."""
    p = module.params
    if not p["unit_file"]:
        module.fail_json(msg="consensus_of needs unit_file", refused=False)
    try:
        peer = read_claims(p["unit_file"], p["numerics_flags"])
        ep = _endpoint(module, peer.as_dict())
        node_probe = probe_claims(p["consensus_of"])
        verdict = judge(ep, parse_prompts(p["prompts"]), node_probe, peer,
                        tolerance_for(p["dtype"], p["tolerances"]))
    except (ValueError, RuntimeError, OSError) as exc:
        module.fail_json(msg=str(exc), refused=False)
    module.exit_json(changed=False, ok=verdict.status != "failed", consensus=verdict.as_dict(),
                     msg=f"consensus {verdict.status}: {verdict.reason}")


def reference_only(module: AnsibleModule) -> None:
    """Reference mode: the transformers reference into the cache, nothing asked of an endpoint."""
    p = module.params
    if not (p["reference_model_path"] and p["reference_cache"]):
        module.fail_json(msg="reference_only needs reference_model_path and reference_cache",
                         refused=False)
    try:
        _refs, seconds, written = references(
            parse_prompts(p["prompts"]), p["reference_model_path"], p["reference_cache"], None,
            p["max_tokens"], p["window"], write=not module.check_mode)
    except Refused as exc:
        module.fail_json(msg=str(exc), refused=True)
    except Exception as exc:  # (torch or transformers failing on the node's stack)
        module.fail_json(msg=f"{type(exc).__name__}: {exc}", refused=False)
    module.exit_json(changed=written, reference_seconds=seconds,
                     msg=f"reference taken in {seconds:.1f} s" if written or seconds
                     else "reference found in the cache")


def main() -> None:
    module = AnsibleModule(argument_spec=SPEC, required_together=TLS_REQUIRED_TOGETHER,
                           supports_check_mode=True)
    p = module.params
    if p["consensus_of"] is not None:
        consensus(module)
    if p["reference_only"]:
        reference_only(module)
    try:
        claims = _claims(module)
        meta = {**p["meta"], **({"claims": claims} if claims else {})}
        prompts = parse_prompts(p["prompts"])
        tol = tolerance_for(p["dtype"], p["tolerances"])
        refs, seconds, written = references(
            prompts, p["reference_model_path"], p["reference_cache"], p["baseline"],
            p["max_tokens"], p["window"], write=not module.check_mode)
        ep = _endpoint(module, claims)
        fp, verdicts = run(ep, prompts, refs, tol, p["max_tokens"], p["window"], meta)
        node_probe = probe(ep, prompts, fp, p["max_tokens"]) if p["consensus_probe"] else None
    except Refused as exc:
        module.fail_json(msg=str(exc), refused=True)
    except (ValueError, RuntimeError, OSError) as exc:
        module.fail_json(msg=str(exc), refused=False)
    except Exception as exc:  # (torch or transformers failing on the node's stack)
        # a failure with its reason, not a traceback: callers read msg (role fingerprint_gate)
        module.fail_json(msg=f"{type(exc).__name__}: {exc}", refused=False)
    ok = all(v.ok for v in verdicts.values())
    out = {
        "changed": written, "ok": ok, "fingerprint": fp.as_dict(), "reference_seconds": seconds,
        "verdicts": {k: v.as_dict() for k, v in verdicts.items()},
        **({"probe": node_probe.as_dict()} if node_probe else {}),
        "msg": "; ".join(f"{k}: {v.summary}" for k, v in verdicts.items())
        or "no reference given: recorded the endpoint's own fingerprint",
    }
    if ok or not p["fail_on_mismatch"]:
        module.exit_json(**out)
    module.fail_json(**out)


if __name__ == "__main__":
    main()
