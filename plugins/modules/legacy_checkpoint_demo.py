#!/usr/bin/python
# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module instinct.vllm.legacy_checkpoint_demo (logic: _model_convert/demo.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: legacy_checkpoint_demo
short_description: Write a tiny random checkpoint in the legacy GPTOSS format
version_added: "0.1.0"
description:
  - Writes a small checkpoint in the legacy GPTOSS ("gpt-oss-120B") layout - C(config.json)
    with C(architectures=[GPTOSSForCausalLM]) and the RoPE base in C(custom_rope_theta),
    zip-format PyTorch C(.bin) shards with C(pytorch_model.bin.index.json), a sentencepiece
    C(tokenizer.model) trained on a few lines, C(special_tokens_map.json) and a
    C(tokenizer_config.json) with a chat template - with random weights.
  - Used by the C(instinct.vllm.model) role's demo so the demo serves a model that
    M(instinct.vllm.model_convert) converted. The defaults (head_dim 32, float32) suit vLLM on CPU.
  - Needs torch and sentencepiece on the host (set C(ansible_python_interpreter)).
  - Idempotent - an existing checkpoint written with the same options is left alone.
extends_documentation_fragment:
  - instinct.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Reports whether the checkpoint would be written.
  diff_mode:
    support: none
author:
  - instinct.vllm maintainers (@instinct-vllm)
options:
  dest:
    description: Directory to write (created).
    type: path
    required: true
  hidden_size:
    description: Hidden size.
    type: int
    default: 128
  num_hidden_layers:
    description: Number of decoder layers.
    type: int
    default: 2
  num_attention_heads:
    description: Attention heads (head_dim is hidden_size / heads; keep it >= 32 for vLLM on CPU).
    type: int
    default: 4
  num_key_value_heads:
    description: KV heads (GQA).
    type: int
    default: 2
  intermediate_size:
    description: MLP size.
    type: int
    default: 256
  shards:
    description: Number of C(.bin) shards.
    type: int
    default: 8
  dtype:
    description: Weight dtype.
    type: str
    choices: [float32, float16, bfloat16]
    default: float32
  seed:
    description: Random seed of the weights.
    type: int
    default: 0
"""

EXAMPLES = r"""
- name: A tiny legacy checkpoint for the demo
  instinct.vllm.legacy_checkpoint_demo:
    dest: /srv/models/demo-legacy
  vars:
    ansible_python_interpreter: /opt/vllm/venv/bin/python
"""

RETURN = r"""
path:
  description: The checkpoint directory.
  returned: always
  type: str
tensors:
  description: Number of tensors.
  returned: when changed and not check mode
  type: int
bytes:
  description: Tensor bytes written.
  returned: when changed and not check mode
  type: int
"""

import json  # noqa: E402
import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.instinct.vllm.plugins.module_utils.model_convert import (  # noqa: E402
    LegacySpec,
    make_legacy_checkpoint,
)

MARKER = ".legacy_checkpoint_demo.json"


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "hidden_size": {"type": "int", "default": 128},
            "num_hidden_layers": {"type": "int", "default": 2},
            "num_attention_heads": {"type": "int", "default": 4},
            "num_key_value_heads": {"type": "int", "default": 2, "no_log": False},
            "intermediate_size": {"type": "int", "default": 256},
            "shards": {"type": "int", "default": 8},
            "dtype": {
                "type": "str",
                "default": "float32",
                "choices": ["float32", "float16", "bfloat16"],
            },
            "seed": {"type": "int", "default": 0},
        },
        supports_check_mode=True,
    )
    p = dict(module.params)
    dest = Path(p.pop("dest"))
    if p["hidden_size"] % p["num_attention_heads"]:
        module.fail_json(msg="hidden_size must be a multiple of num_attention_heads")
    marker = dest / MARKER
    try:
        if json.loads(marker.read_text(encoding="utf-8")) == p:
            module.exit_json(changed=False, path=str(dest))
    except (OSError, ValueError):
        pass
    if module.check_mode:
        module.exit_json(changed=True, path=str(dest))
    if dest.exists() and any(dest.iterdir()) and not marker.exists():
        module.fail_json(
            msg=f"dest {dest} exists and was not written by this module; not touching it"
        )
    if marker.exists():
        shutil.rmtree(dest)  # ours, written with other options
    info = make_legacy_checkpoint(dest, LegacySpec(**p))
    marker.write_text(json.dumps(p), encoding="utf-8")
    module.exit_json(changed=True, path=str(dest), tensors=info["tensors"], bytes=info["bytes"])


if __name__ == "__main__":
    main()
