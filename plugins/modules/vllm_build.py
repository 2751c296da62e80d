#!/usr/bin/python
# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module: build a vLLM wheel (setup.py bdist_wheel), log it, classify a failure (thin)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_build
short_description: Build a vLLM wheel from a source tree and classify a failed build
description:
  - Runs C(python setup.py bdist_wheel --dist-dir) O(dist_dir) in O(src) (the way AMD's
    Dockerfile.rocm builds vLLM) with O(env) added to the environment, stdout and stderr
    to O(log).
  - On failure returns the log tail and a category (C(build_patch_failure), C(build_oom_kill),
    C(build_compiler_crash), C(build_cxx_headers_missing), C(build_missing_dependency) or
    C(unknown)) with the deciding line and its fix as the hint; M(instinct.vllm.diagnose_classify)
    names the same class and fix for the same log.
  - Meant to run with C(async); the caller polls it and shows the log's last line.
options:
  src: {description: The patched source tree., type: path, required: true}
  python: {description: The interpreter (the build virtualenv's)., type: path, required: true}
  env: {description: Build environment (from vllm_build_env)., type: dict, required: true}
  log: {description: Build log file on the host., type: path, required: true}
  dist_dir: {description: Where the wheel is written., type: path, required: true}
extends_documentation_fragment:
  - instinct.vllm.attributes
attributes:
  check_mode:
    support: none
  diff_mode:
    support: none
author:
  - instinct.vllm maintainers (@instinct-vllm)
"""

EXAMPLES = r"""
- name: Build the wheel
  instinct.vllm.vllm_build:
    src: /var/lib/instinct-vllm/source/abc/vllm-0.6.6.post1
    python: /opt/vllm/venv/bin/python
    env: "{{ build.env }}"
    log: /var/lib/instinct-vllm/source/abc/build.log
    dist_dir: /var/lib/instinct-vllm/source/abc/dist
  async: 10800
  poll: 0
"""

RETURN = r"""
wheel: {description: Path of the wheel built., type: str, returned: success}
sha256: {description: SHA-256 of the wheel., type: str, returned: success}
category: {description: Failure category., type: str, returned: failure}
evidence: {description: The log line that decided the category., type: str, returned: failure}
hint: {description: The fix for the category., type: str, returned: failure}
tail: {description: The last 40 non-empty log lines., type: list, elements: str, returned: failure}
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.instinct.vllm.plugins.module_utils.vllm_build import run_build  # noqa: E402


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "src": {"type": "path", "required": True},
            "python": {"type": "path", "required": True},
            "env": {"type": "dict", "required": True},
            "log": {"type": "path", "required": True},
            "dist_dir": {"type": "path", "required": True},
        },
        supports_check_mode=False,
    )
    p = module.params
    env = {str(k): str(v) for k, v in p["env"].items()}
    result = run_build(p["src"], p["python"], env, p["log"], p["dist_dir"])
    if result["rc"] != 0:
        module.fail_json(
            msg=f"vLLM build failed ({result['category']}): {result['evidence'] or 'see the log'}; "
            f"{result['hint']}; log: {p['log']}",
            **result,
        )
    module.exit_json(changed=True, log=p["log"], **result)


if __name__ == "__main__":
    main()
