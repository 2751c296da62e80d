#!/usr/bin/python
# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module: take a vLLM node out of an HAProxy gateway's rotation, or put it back."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gateway_server
short_description: Drain, hold out or restore a server of an HAProxy gateway (runtime API)
description:
  - Sets a server's admin state through HAProxy's runtime API socket
    (C(set server <backend>/<server> state ready|drain|maint)) and waits for what the state
    promises - C(drain) with O(wait=true) waits until the server carries no stream (C(scur) 0 in
    C(show stat)) so running generations finish; C(ready) with O(wait=true) waits until the
    health check reports the server C(UP).
  - C(drain) sends no new request to the server while its running streams go on; C(maint) also
    stops its health checks (a node held out after a failed gate).
  - Runs on the gateway host (root can use the admin socket). Supports check mode.
options:
  socket:
    description: Path of HAProxy's admin socket (C(stats socket ... level admin)).
    type: path
    default: /run/haproxy/admin.sock
  backend:
    description: Backend name.
    type: str
    required: true
  server:
    description: Server name in the backend.
    type: str
    required: true
  state:
    description: Admin state to set.
    type: str
    required: true
    choices: [ready, drain, maint]
  wait:
    description: Wait until the server is idle (drain, maint) or C(UP) (ready).
    type: bool
    default: true
  timeout:
    description: Seconds to wait at most.
    type: float
    default: 600
  fail_on_timeout:
    description: Fail when the wait times out; false returns C(waited_ok=false) instead.
    type: bool
    default: true
extends_documentation_fragment:
  - instinct.vllm.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
author:
  - instinct.vllm maintainers (@instinct-vllm)
"""

EXAMPLES = r"""
- name: Drain node1, waiting up to 10 minutes for its streams to finish
  instinct.vllm.gateway_server:
    backend: vllm
    server: node1
    state: drain
    timeout: 600
  delegate_to: gateway1
"""

RETURN = r"""
status_before:
  description: The server's status in show stat before the change (UP, DRAIN, MAINT, DOWN, ...).
  type: str
  returned: always
status:
  description: Its status after the change (and the wait).
  type: str
  returned: always
scur:
  description: Streams on the server at the end (requests in flight through the gateway).
  type: int
  returned: always
scur_before:
  description: Streams on the server before the change.
  type: int
  returned: always
waited:
  description: Seconds waited.
  type: float
  returned: always
waited_ok:
  description: Whether the wait reached its goal (true when nothing was waited for).
  type: bool
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.instinct.vllm.plugins.module_utils.haproxy_runtime import (  # noqa: E402
    STATES,
    RuntimeApiError,
    admin_state,
    healthy,
    idle,
    set_state,
    stat,
    wait_until,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "socket": {"type": "path", "default": "/run/haproxy/admin.sock"},
            "backend": {"type": "str", "required": True},
            "server": {"type": "str", "required": True},
            "state": {"type": "str", "required": True, "choices": list(STATES)},
            "wait": {"type": "bool", "default": True},
            "timeout": {"type": "float", "default": 600.0},
            "fail_on_timeout": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    path, backend, server, state = p["socket"], p["backend"], p["server"], p["state"]
    try:
        before = stat(path, backend, server)
        changed = admin_state(path, backend, server) != state
        if module.check_mode:
            module.exit_json(changed=changed, status_before=before.status, status=before.status,
                             scur_before=before.scur, scur=before.scur, waited=0.0, waited_ok=True)
        if changed:
            set_state(path, backend, server, state)
        result = wait_until(lambda: stat(path, backend, server),
                            healthy if state == "ready" else idle,
                            p["timeout"] if p["wait"] else 0.0)
    except RuntimeApiError as exc:
        module.fail_json(msg=str(exc))
    out = {"changed": changed, "status_before": before.status, "status": result.last.status,
           "scur_before": before.scur, "scur": result.last.scur,
           "waited": round(result.waited, 1), "waited_ok": result.ok or not p["wait"]}
    if out["waited_ok"] or not p["fail_on_timeout"]:
        module.exit_json(**out)
    goal = "UP" if state == "ready" else "idle (scur 0)"
    module.fail_json(msg=f"{backend}/{server} is {state} but not {goal} after {p['timeout']} s "
                         f"(status {result.last.status}, scur {result.last.scur})", **out)


if __name__ == "__main__":
    main()
