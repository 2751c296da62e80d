#!/usr/bin/python
# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module instinct.vllm.model_convert (thin: logic in module_utils/model_convert*)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_convert
short_description: Convert a legacy checkpoint into a layout vLLM and transformers load as is
version_added: "0.1.0"
description:
  - Streams a checkpoint tensor by tensor (never the whole model in memory) from zip-format
    PyTorch C(.bin) shards (with or without C(pytorch_model.bin.index.json)), a single C(.bin), or
    safetensors (single or sharded) into safetensors shards with C(model.safetensors.index.json).
  - Validates before writing anything. Every source tensor is mapped exactly once, every tensor
    the target needs is present, shapes agree with C(config.json) and the RoPE base is present.
    Errors name the file and the tensor.
  - Writes C(config.json) (for O(profile=gptoss_llama) C(architectures=[LlamaForCausalLM]),
    C(model_type=llama), C(rope_theta) from C(custom_rope_theta), every other field kept),
    C(generation_config.json), the tokenizer files (a real C(tokenizer.json) made with
    transformers' sentencepiece converter) and C(model_convert_manifest.json) (source
    fingerprint, options, tool version, sha256 of every output file).
  - Writes into a temporary directory beside O(dest), fsyncs and renames it into place; O(src) is
    never modified. An interrupted run (even C(kill -9)) leaves O(dest) as it was, and a rerun
    produces the same bytes as an uninterrupted run. A rerun with the same source (names, sizes,
    mtimes) and options reports C(changed=false) without rehashing the weights.
  - With O(profile=auto), a safetensors checkpoint of an architecture vLLM serves natively (for
    example the real C(GptOssForCausalLM) gpt-oss-120b) is not converted; its layout is verified
    and RV(model_dir) is O(src).
  - Runs on the managed host with a Python that has torch, safetensors, transformers,
    sentencepiece, tokenizers and protobuf (set C(ansible_python_interpreter) on the task, for
    example to the vLLM venv's python).
  - Outside Ansible, the same code runs as
    C(python -m ansible_collections.instinct.vllm.plugins.module_utils._model_convert.cli SRC DEST)
    or C(files/model-convert SRC DEST) (see docs/model-conversion.md).
extends_documentation_fragment:
  - instinct.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Plans and validates everything, writes nothing.
  diff_mode:
    support: full
    details: Shows C(config.json) of the source against the one written.
author:
  - instinct.vllm maintainers (@instinct-vllm)
options:
  src:
    description: Source checkpoint directory (C(config.json) plus weights).
    type: path
    required: true
  dest:
    description: Output directory. Its parent must exist. It must not be inside O(src).
    type: path
    required: true
  profile:
    description:
      - C(gptoss_llama) maps the legacy GPTOSS checkpoint (Llama-shaped, C(transformer.h.N.*) or
        Hugging Face Llama tensor names) to C(LlamaForCausalLM) and validates it against the config.
      - C(none) renames nothing (unless O(key_map) says so) and keeps C(config.json) apart from
        O(config_overrides).
      - C(auto) picks C(gptoss_llama) for C(GPTOSSForCausalLM) (or a config whose RoPE base is
        only in C(custom_rope_theta)), only verifies safetensors checkpoints of architectures
        vLLM serves natively, and fails on anything it does not know.
    type: str
    choices: [auto, gptoss_llama, none]
    default: auto
  key_map:
    description:
      - Ordered rename rules tried before the profile's; the first rule whose O(key_map[].pattern)
        matches the whole tensor name wins.
    type: list
    elements: dict
    default: []
    suboptions:
      pattern:
        description: Python regular expression, matched against the whole source tensor name.
        type: str
        required: true
      replace:
        description: Target name (C(\1) refers to groups). Null drops the tensor on purpose.
        type: str
  config_overrides:
    description: Fields set in the output C(config.json) after the profile's rewrite.
    type: dict
    default: {}
  dtype:
    description: Floating-point dtype written; C(keep) keeps each tensor's dtype.
    type: str
    choices: [keep, float16, bfloat16, float32]
    default: keep
  max_shard_size:
    description: Largest safetensors shard, for example C(5GB), C(500MB), C(2GiB).
    type: str
    default: 5GB
  tokenizer:
    description:
      - C(convert) copies C(tokenizer.model) and writes C(tokenizer.json), C(tokenizer_config.json)
        and C(special_tokens_map.json). C(copy) copies the tokenizer files as they are.
        C(skip) writes none. C(auto) copies when C(tokenizer.json) exists, converts when only
        C(tokenizer.model) does, and skips otherwise.
    type: str
    choices: [auto, convert, copy, skip]
    default: auto
  verify:
    description:
      - C(layout) checks the written index against the shard headers (and, when nothing changed,
        the file sizes against the manifest). C(full) also rehashes every output file against
        the manifest. C(none) skips the checks.
    type: str
    choices: [none, layout, full]
    default: layout
  force:
    description: Convert even when O(dest) is up to date.
    type: bool
    default: false
  direct_io:
    description:
      - Copy the weights with direct I/O (C(O_DIRECT)) where the filesystems of O(src) and
        O(dest) allow it, reading from the page cache only the ranges it already holds. The bytes
        written are the same either way; direct I/O spares the host's page cache and, on a
        checkpoint larger than RAM, most of the copy's CPU time.
      - V(false), or a filesystem that refuses C(O_DIRECT) (tmpfs), copies through the page
        cache with C(copy_file_range).
    type: bool
    default: true
  progress_file:
    description:
      - Where to write the copy's progress as JSON (C(phase), C(label), C(done), C(total) in
        bytes, C(started), C(updated)) about once a second, for a task run with C(async) and
        polled (role C(instinct.vllm.model) shows it with the C(instinct.vllm.progress_message)
        filter). Empty writes none.
    type: path
    default: ""
"""

EXAMPLES = r"""
- name: Convert the legacy GPTOSS checkpoint for vLLM
  instinct.vllm.model_convert:
    src: /srv/models/gpt-oss-120B-legacy
    dest: /srv/models/gpt-oss-120B-llama
    dtype: bfloat16
  vars:
    ansible_python_interpreter: /opt/vllm/venv/bin/python

- name: A checkpoint whose tensors use other names
  instinct.vllm.model_convert:
    src: /srv/models/legacy
    dest: /srv/models/converted
    profile: gptoss_llama
    key_map:
      - pattern: 'decoder\.layers\.(\d+)\.attention\.wq\.weight'
        replace: 'model.layers.\1.self_attn.q_proj.weight'
      - pattern: '.*\._extra_state'
        replace: null
    config_overrides:
      max_position_embeddings: 8192
  vars:
    ansible_python_interpreter: /opt/vllm/venv/bin/python
"""

RETURN = r"""
changed:
  description: Whether dest was (or, in check mode, would be) written.
  returned: always
  type: bool
model_dir:
  description: The directory to serve (O(dest), or O(src) for a native checkpoint).
  returned: always
  type: str
native:
  description: True when O(profile=auto) found a checkpoint vLLM serves as it is.
  returned: always
  type: bool
profile:
  description: The profile applied (C(auto) resolved).
  returned: always
  type: str
tensors:
  description: Number of tensors written (or verified).
  returned: always
  type: int
bytes:
  description: Tensor bytes written (or verified).
  returned: always
  type: int
shards:
  description: Number of safetensors shards.
  returned: always
  type: int
files:
  description: Files in O(dest).
  returned: always
  type: list
  elements: str
dropped:
  description: Source tensors dropped on purpose by a rule.
  returned: always
  type: list
  elements: str
seconds:
  description: Wall time of the run.
  returned: always
  type: float
throughput_mb_s:
  description: Tensor MB (10^6 bytes) written per second.
  returned: always
  type: float
io:
  description:
    - How the weights were copied. C(direct) - with direct I/O (C(O_DIRECT)); C(page cache) -
      through the page cache (C(copy_file_range), or reads and writes), because
      O(direct_io=false) or a filesystem refused C(O_DIRECT); C(mixed) - some shards each way;
      C(none) - no weights to copy.
  returned: when changed and not check mode
  type: str
  sample: direct
progress:
  description: Progress snapshots (percent, GB done) taken at every 10 percent.
  returned: when changed and not check mode
  type: list
  elements: str
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.instinct.vllm.plugins.module_utils.model_convert import (  # noqa: E402
    ConvertError,
    ConvertOptions,
    convert,
)
from ansible_collections.instinct.vllm.plugins.module_utils.model_fetch import (  # noqa: E402
    ProgressFile,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "src": {"type": "path", "required": True},
            "dest": {"type": "path", "required": True},
            "profile": {
                "type": "str",
                "default": "auto",
                "choices": ["auto", "gptoss_llama", "none"],
            },
            "key_map": {
                "type": "list",
                "no_log": False,
                "elements": "dict",
                "default": [],
                "options": {
                    "pattern": {"type": "str", "required": True},
                    "replace": {"type": "str"},
                },
            },
            "config_overrides": {"type": "dict", "default": {}},
            "dtype": {
                "type": "str",
                "default": "keep",
                "choices": ["keep", "float16", "bfloat16", "float32"],
            },
            "max_shard_size": {"type": "str", "default": "5GB"},
            "tokenizer": {
                "type": "str",
                "default": "auto",
                "choices": ["auto", "convert", "copy", "skip"],
            },
            "verify": {
                "type": "str",
                "default": "layout",
                "choices": ["none", "layout", "full"],
            },
            "force": {"type": "bool", "default": False},
            "direct_io": {"type": "bool", "default": True},
            "progress_file": {"type": "path", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    opts = ConvertOptions(
        src=p["src"],
        dest=p["dest"],
        profile=p["profile"],
        key_map=p["key_map"],
        config_overrides=p["config_overrides"],
        dtype=p["dtype"],
        max_shard_size=p["max_shard_size"],
        tokenizer=p["tokenizer"],
        verify=p["verify"],
        force=p["force"],
        direct_io=p["direct_io"],
    )
    snapshots: list[str] = []
    next_step = [10]
    live = ProgressFile(
        None if module.check_mode else p["progress_file"] or None,
        "convert",
        os.path.basename(p["dest"]),
    )

    def progress(done: int, total: int, name: str) -> None:
        live.update(done, total, force=done >= total)
        pct = 100 * done // total if total else 100
        if pct >= next_step[0]:
            line = f"{pct}% {done / 1e9:.2f}/{total / 1e9:.2f} GB ({name})"
            snapshots.append(line)
            module.log(f"model_convert {p['dest']}: {line}")
            next_step[0] = (pct // 10 + 1) * 10

    try:
        result = convert(opts, progress=progress, check=module.check_mode)
    except ConvertError as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg=f"model_convert: {exc}")
    diff = result.pop("diff", None)
    if module._diff and diff and result["changed"]:
        result["diff"] = diff
    if snapshots:
        result["progress"] = snapshots
    if live.error:
        module.warn(live.error)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
