#!/usr/bin/python
# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module: check vLLM server flags against the installed vLLM's own argument parser."""

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_args_check
short_description: Check vLLM server flags against the installed vLLM's own parser
description:
  - Builds the OpenAI server parser of the vLLM installed for O(python) (C(make_arg_parser)
    from C(vllm.entrypoints.launchers.cli_args) on current releases or
    C(vllm.entrypoints.openai.cli_args) on 0.6.x, with C(FlexibleArgumentParser) from
    C(vllm.utils.argparse_utils) or C(vllm.utils)), parses the flags with it and runs vLLM's
    own C(validate_parsed_serve_args) where it exists, without starting anything.
  - "Fails naming the bad flag - an unknown flag with close matches, or an invalid choice with
    the valid choices (e.g. C(invalid choice 'fp16' for --kv-cache-dtype; valid: auto, fp8, ...))."
  - The parser is loaded in a fresh process of O(python) (the vLLM virtualenv's interpreter);
    the module itself runs with any interpreter. Changes nothing, so check mode runs the same
    check.
  - C(api_key) and C(model) are refused as flags (the key belongs in the environment file, the
    model path is separate).
options:
  flags:
    description:
      - Server flags as a dict, rendered like the filter C(instinct.vllm.vllm_args)
        (mutually exclusive with O(argv)).
    type: dict
  argv:
    description: Server flags already rendered to an argv list (mutually exclusive with O(flags)).
    type: list
    elements: str
  repeat:
    description: Flags whose list values are rendered as repeated flags (with O(flags)).
    type: list
    elements: str
    default: []
  python:
    description:
      - The interpreter that has vLLM (the vLLM virtualenv's C(bin/python)). The check runs in
        a fresh process of it - vLLM/torch cannot be imported inside an ansible-core 2.19
        module process (its C(sys.intern) patch breaks torch's import).
      - Empty means the interpreter running the module.
    type: str
    default: ""
  timeout:
    description: Seconds the check may take (importing vLLM takes 15-60 s).
    type: float
    default: 600
  cache_dir:
    description:
      - Where an accepted argv is kept, under a key of the argv, this check's own code and every
        distribution installed in the virtualenv of O(python) (their C(RECORD) files, which
        list each installed file with its hash). While none of these changes, a re-run (the
        idempotence run, every rollout) reads the answer back (RV(cached)) instead of importing
        vLLM again. A refusal is never kept; nothing is written in check mode.
      - Empty means C(.instinct-flag-check) in the virtualenv of O(python); nothing is kept
        when O(python) is not in a virtualenv.
    type: str
    default: ""
  cache:
    description: Set to V(false) to always import vLLM (no answer read back or kept).
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
- name: Check the server flags against the installed vLLM
  instinct.vllm.vllm_args_check:
    flags: "{{ vllm_service_server_flags }}"
    python: /opt/instinct-vllm/venv/bin/python
"""

RETURN = r"""
argv:
  description: The argv that was checked.
  type: list
  elements: str
  returned: always
parsed:
  description: The parsed value of each flag given, by its argparse dest name.
  type: dict
  returned: success
vllm_version:
  description: The version of the vLLM whose parser was used.
  type: str
  returned: when vLLM imported
parser_class:
  description: The module that provided FlexibleArgumentParser.
  type: str
  returned: when vLLM imported
make_arg_parser:
  description: The module that provided make_arg_parser.
  type: str
  returned: when vLLM imported
cached:
  description: True when the answer was read back from O(cache_dir) (vLLM was not imported).
  type: bool
  returned: when read back
"""

import sys  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.instinct.vllm.plugins.module_utils.vllm_args import (  # noqa: E402
    VllmArgsError,
    check_in_subprocess,
    default_cache_dir,
    flags_to_argv,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "flags": {"type": "dict"},
            "argv": {"type": "list", "elements": "str"},
            "repeat": {"type": "list", "elements": "str", "default": []},
            "python": {"type": "str", "default": ""},
            "timeout": {"type": "float", "default": 600.0},
            "cache_dir": {"type": "str", "default": ""},
            "cache": {"type": "bool", "default": True},
        },
        mutually_exclusive=[("flags", "argv")],
        required_one_of=[("flags", "argv")],
        supports_check_mode=True,
    )
    p = module.params
    out: dict = {"changed": False, "argv": []}
    try:
        argv = p["argv"] if p["argv"] is not None else flags_to_argv(p["flags"], p["repeat"])
        out["argv"] = argv
        python = p["python"] or sys.executable
        cache_dir = (p["cache_dir"] or default_cache_dir(python)) if p["cache"] else None
        out.update(check_in_subprocess(python, argv, p["timeout"], None, cache_dir,
                                       not module.check_mode))  # fmt: skip
    except VllmArgsError as exc:
        module.fail_json(msg=str(exc), **out)
    msg = f"{len(out['parsed'])} flag(s) accepted by vLLM {out['vllm_version']}"
    module.exit_json(msg=msg, **out)


if __name__ == "__main__":
    main()
