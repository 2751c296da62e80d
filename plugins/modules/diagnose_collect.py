# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Collect a vLLM node's diagnostic evidence into a redacted archive (thin module; the logic
is in module_utils/diagnose.py and module_utils/_diagnose/)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: diagnose_collect
short_description: Collect a vLLM node's diagnostic evidence into one redacted archive
version_added: "0.2.0"
description:
  - Runs read-only collectors on the node - rocminfo, amd-smi, rocm-smi, lspci, dkms status
    (and the amdgpu DKMS make.log), lsmod, the amdgpu / lockdown / OOM lines of the kernel log,
    the modprobe blacklist and Secure Boot state, the groups of the service user, the unit
    file, its status and journal, the env file, the venv's pip freeze, torch / triton / vllm /
    transformers versions with torch.version.hip and the import errors, the build stamp
    (PYTORCH_ROCM_ARCH of the build key), the build log's tail and the model's size.
  - A missing tool or file is recorded as such (status C(missing) / C(absent)); a failing
    command is recorded with its exit code and output. Nothing on the node changes except the
    evidence directory and archive under I(dest).
  - Every text is redacted before it is written - the values in I(secrets), the values of
    secret-named variables (KEY, TOKEN, SECRET, PASSWORD) in I(env_file) and of any
    C(NAME=value) with such an upper-case name, bearer tokens and Hugging Face tokens.
options:
  dest:
    description:
      - Directory on the node for the evidence; C(<dest>/<name>.tar.gz) is written (mode 0600),
        the evidence itself in a new directory inside it, removed afterwards.
      - Made here (mode 0700) when absent. An existing one is used only when this user owns it
        and no one else can write in it or rename it (its parents owned by root or this user,
        sticky where others may write). One made by another local user is refused, as any
        link in it could redirect what root writes. Files are created new, never through a
        link.
    type: path
    required: true
  name:
    description: Name of the evidence directory and archive (usually the inventory hostname).
    type: str
    required: true
  secrets:
    description: Values that must never appear in the archive (the API key, the HF token).
    type: list
    elements: str
    default: []
  venv:
    description: >-
      The vLLM virtualenv (role diagnose passes role vllm_service's published
      C(vllm_service_resolved.venv)).
    type: path
    required: true
  unit:
    description: >-
      The vLLM systemd unit (role diagnose passes role vllm_service's published
      C(vllm_service_resolved.unit)).
    type: str
    required: true
  user:
    description: >-
      The service user whose groups are read (role diagnose passes role vllm_service's published
      C(vllm_service_resolved.user)).
    type: str
    required: true
  env_file:
    description: >-
      The service's env file, read for its secrets and stored redacted (role diagnose passes
      role vllm_service's published C(vllm_service_resolved.env_file)).
    type: path
    required: true
  stamp:
    description: The build stamp role vllm writes; empty is C(<venv>/instinct-vllm-source.json).
    type: str
    default: ""
  source_work_dir:
    description: Where the source method keeps its per-key build directories and build.log
      (role vllm's vllm_source_work_dir).
    type: path
    required: true
  build_log:
    description: The build log; empty finds it from the stamp's key (else the newest).
    type: str
    default: ""
  model_path:
    description: The served model directory (its weight size is compared with the VRAM).
    type: str
    default: ""
  journal_lines:
    description: Lines of the unit's journal kept.
    type: int
    default: 400
  kernel_lines:
    description: Matching kernel log lines kept.
    type: int
    default: 300
  build_log_lines:
    description: Lines of the build log's tail kept.
    type: int
    default: 200
  probe_timeout:
    description: Seconds the versions probe (imports torch, triton, amdsmi, vllm) may take.
    type: int
    default: 180
  probe_imports:
    description:
      - Modules the versions probe imports (import-time failures show there); versions come
        from the package metadata either way. torch gives torch.version.hip and its archs;
        vllm is the slow one on a busy node.
    type: list
    elements: str
    default: [torch, triton, amdsmi, transformers, vllm]
  workers:
    description: Collectors run at once.
    type: int
    default: 4
  gpu_expected:
    description: Whether the node should have AMD GPUs (false on the cpu stack); recorded
      for the classifier.
    type: bool
    default: true
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
- name: Collect the evidence
  instinct.vllm.diagnose_collect:
    dest: /var/tmp/instinct-diagnose
    name: "{{ inventory_hostname }}"
    secrets: ["{{ vllm_service_api_key }}"]
    venv: "{{ vllm_service_resolved.venv }}"
    unit: "{{ vllm_service_resolved.unit }}"
    user: "{{ vllm_service_resolved.user }}"
    env_file: "{{ vllm_service_resolved.env_file }}"
  no_log: false
  register: collected
"""

RETURN = r"""
archive:
  description: Path of the archive on the node.
  type: str
  returned: success
collectors:
  description: Per collector - name, status (ok, failed, missing, absent, timeout, error),
    source (argv or path), rc, note.
  type: list
  elements: dict
  returned: success
redacted_values:
  description: How many distinct secret values were redacted against.
  type: int
  returned: success
"""

import contextlib  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.instinct.vllm.plugins.module_utils.diagnose import (  # noqa: E402
    Redactor,
    Settings,
    UnsafeDirectory,
    collect,
    default_specs,
    pack,
    private_dir,
    write_evidence,
)

_SETTINGS = (
    "venv",
    "unit",
    "user",
    "env_file",
    "stamp",
    "source_work_dir",
    "build_log",
    "model_path",
    "journal_lines",
    "kernel_lines",
    "build_log_lines",
    "probe_timeout",
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "name": {"type": "str", "required": True},
            "secrets": {"type": "list", "elements": "str", "default": [], "no_log": True},
            "venv": {"type": "path", "required": True},
            "unit": {"type": "str", "required": True},
            "user": {"type": "str", "required": True},
            "env_file": {"type": "path", "required": True},
            "stamp": {"type": "str", "default": ""},
            "source_work_dir": {"type": "path", "required": True},
            "build_log": {"type": "str", "default": ""},
            "model_path": {"type": "str", "default": ""},
            "journal_lines": {"type": "int", "default": 400},
            "kernel_lines": {"type": "int", "default": 300},
            "build_log_lines": {"type": "int", "default": 200},
            "probe_timeout": {"type": "int", "default": 180},
            "probe_imports": {
                "type": "list",
                "elements": "str",
                "default": ["torch", "triton", "amdsmi", "transformers", "vllm"],
            },
            "workers": {"type": "int", "default": 4},
            "gpu_expected": {"type": "bool", "default": True},
        },
        supports_check_mode=False,
    )
    p = module.params
    if "/" in p["name"] or p["name"] in ("", ".", ".."):
        module.fail_json(msg=f"name: {p['name']!r} is not a file name")
    try:  # before anything is collected: a directory another user could change is refused
        root = private_dir(p["dest"])
    except (UnsafeDirectory, OSError) as exc:
        module.fail_json(msg=f"dest: {exc}")
    settings = Settings(**{k: p[k] for k in _SETTINGS}, probe_imports=tuple(p["probe_imports"]))
    redact = Redactor(p["secrets"])
    with contextlib.suppress(OSError):  # an unreadable env file is recorded by its collector
        redact.add_env_file(Path(settings.env_file).read_text(encoding="utf-8"))
    started = time.time()
    results = collect(default_specs(settings), redact, workers=p["workers"])
    work = Path(tempfile.mkdtemp(prefix=f"{p['name']}.", dir=root))  # new, 0700
    meta = {
        "host": p["name"],
        "collected_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started, 1),
        "gpu_expected": p["gpu_expected"],
        "settings": {k: p[k] for k in _SETTINGS},
    }
    write_evidence(results, work, meta)
    archive = pack(work, root / f"{p['name']}.tar.gz", p["name"])
    shutil.rmtree(work)
    module.exit_json(
        changed=True,
        archive=archive,
        collectors=[r.index_entry() for r in results],
        redacted_values=redact.count,
    )


if __name__ == "__main__":
    main()
