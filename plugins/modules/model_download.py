#!/usr/bin/python
# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module instinct.vllm.model_download (thin: logic in module_utils/model_fetch)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_download
short_description: Download a model archive or a Hugging Face snapshot with progress
version_added: "0.1.0"
description:
  - O(source=url) streams O(url) into O(dest), checked against O(checksum) before it is renamed
    into place (a partial or wrong file never becomes O(dest)); a O(dest) that already has the
    checksum is kept and nothing is fetched.
  - O(source=huggingface) downloads the snapshot O(hf_repo) at O(hf_revision) into O(dest) with
    C(huggingface_hub) (run the task with a Python that has it, for example the vLLM venv's);
    a marker file makes a second run with the same repository and revision unchanged.
  - While it runs it writes O(progress_file) (JSON C(phase), C(label), C(done), C(total),
    C(started), C(updated)) about once a second, so a task started with C(async) and
    C(poll=0) can be polled and its progress shown (role C(instinct.vllm.model) does).
  - O(headers) and O(hf_token) are C(no_log) options, and the credentials inside O(url) (its
    C(user:pass@), secret query values) are masked in everything the module returns.
  - A failure says why (the HTTP status, the server's reason, the start of its answer) with
    the URL's C(user:pass@), secret query parameters (C(token), C(sig), C(X-Amz-Signature)
    ...), authorization headers and tokens replaced by C(***), so the task need not be hidden
    with C(no_log).
extends_documentation_fragment:
  - instinct.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Says whether it would download; fetches nothing.
  diff_mode:
    support: none
    details: Nothing is shown as a diff; the result says what was written.
author:
  - instinct.vllm maintainers (@instinct-vllm)
options:
  source:
    description: What to download.
    type: str
    choices: [url, huggingface]
    default: url
  url:
    description: HTTP(S) URL of the file (O(source=url)); may carry C(user:pass@).
    type: str
  checksum:
    description: C(sha256:<hex>) (or sha384, sha512) of the file (required for O(source=url)).
    type: str
  headers:
    description: Extra request headers (for example C(Authorization)).
    type: dict
    default: {}
  timeout:
    description: Seconds to wait for the server to answer or send more data.
    type: int
    default: 600
  hf_repo:
    description: Hugging Face repository C(owner/name) (O(source=huggingface)).
    type: str
  hf_revision:
    description: Branch, tag or commit of the snapshot.
    type: str
    default: main
  hf_token:
    description: Hugging Face token; empty downloads anonymously.
    type: str
    default: ""
  dest:
    description: The file (O(source=url)) or directory (O(source=huggingface)) to write.
    type: path
    required: true
  progress_file:
    description: Where to write the progress JSON; empty writes none.
    type: path
    default: ""
  label:
    description: What the progress names (default the repository, or the name of O(dest)).
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Download the checkpoint archive, polled for progress
  instinct.vllm.model_download:
    url: https://models.example.internal/gpt-oss-120B-legacy.tar
    checksum: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
    headers:
      Authorization: "Bearer {{ vault_model_token }}"
    dest: /srv/models/.downloads/gpt-oss-120B-legacy.tar
    progress_file: /srv/models/.downloads/gpt-oss-120B-legacy.progress.json
  async: 86400
  poll: 0
  register: download_job

- name: A Hugging Face snapshot
  instinct.vllm.model_download:
    source: huggingface
    hf_repo: openai/gpt-oss-120b
    dest: /srv/models/gpt-oss-120b
  vars:
    ansible_python_interpreter: /opt/vllm/venv/bin/python
"""

RETURN = r"""
dest:
  description: What was written.
  returned: always
  type: str
bytes:
  description: Bytes of the file or snapshot.
  returned: success
  type: int
seconds:
  description: Wall time of the download (absent when nothing was fetched).
  returned: when changed and not check mode
  type: float
source:
  description: The URL with its credentials removed, or C(repo@revision).
  returned: always
  type: str
"""

import os  # noqa: E402
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.urls import open_url  # noqa: E402
from ansible_collections.instinct.vllm.plugins.module_utils import (  # noqa: E402
    model_fetch as mf,
)


def _from_url(module: AnsibleModule, progress: mf.ProgressFile, secrets: list[str]) -> dict:
    p = module.params
    if not p["url"] or not p["checksum"]:
        module.fail_json(msg="model_download: source=url needs url and checksum")

    def opener() -> tuple[Any, int | None]:
        response = open_url(
            p["url"], headers=p["headers"], timeout=p["timeout"], follow_redirects="safe"
        )
        length = response.headers.get("Content-Length")
        return response, int(length) if length and length.isdigit() else None

    return mf.download(opener, p["dest"], p["checksum"], progress, secrets)


def _from_hf(module: AnsibleModule, progress: mf.ProgressFile, secrets: list[str]) -> dict:
    p = module.params
    try:
        from huggingface_hub import HfApi, snapshot_download
    except ImportError:
        module.fail_json(
            msg="model_download: source=huggingface needs huggingface_hub in the "
            "task's Python (ansible_python_interpreter)"
        )
    token = p["hf_token"] or None
    try:
        info = HfApi().model_info(
            p["hf_repo"], revision=p["hf_revision"], files_metadata=True, token=token
        )
        total = sum(int(getattr(f, "size", 0) or 0) for f in info.siblings or []) or None
    except Exception as exc:  # (one redacted message)
        raise mf.FetchError(redact_hf(exc, secrets)) from None
    os.makedirs(p["dest"], exist_ok=True)
    return mf.hf_snapshot(
        lambda: snapshot_download(
            repo_id=p["hf_repo"], revision=p["hf_revision"], local_dir=p["dest"], token=token
        ),
        p["dest"],
        f"{p['hf_repo']}@{p['hf_revision']}",
        total,
        progress,
        secrets,
    )


def redact_hf(exc: BaseException, secrets: list[str]) -> str:
    return mf.redact(f"Hugging Face: {mf.describe_error(exc)}", secrets)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "source": {"type": "str", "default": "url", "choices": ["url", "huggingface"]},
            "url": {"type": "str", "no_log": False},
            "checksum": {"type": "str"},
            "headers": {"type": "dict", "default": {}, "no_log": True},
            "timeout": {"type": "int", "default": 600},
            "hf_repo": {"type": "str"},
            "hf_revision": {"type": "str", "default": "main"},
            "hf_token": {"type": "str", "default": "", "no_log": True},
            "dest": {"type": "path", "required": True},
            "progress_file": {"type": "path", "default": ""},
            "label": {"type": "str", "default": ""},
        },
        required_if=[("source", "huggingface", ["hf_repo"])],
        supports_check_mode=True,
    )
    p = module.params
    secrets = [p["hf_token"], *mf.header_secrets(p["headers"]), *mf.url_secrets(p["url"] or "")]
    # masked wherever they appear in the result, the invocation included
    module.no_log_values.update(s for s in secrets if s)
    shown = (
        mf.redact(p["url"] or "", secrets)
        if p["source"] == "url"
        else f"{p['hf_repo']}@{p['hf_revision']}"
    )
    label = p["label"] or (
        p["hf_repo"] if p["source"] == "huggingface" else os.path.basename(p["dest"])
    )
    if module.check_mode:
        module.exit_json(changed=not os.path.exists(p["dest"]), dest=p["dest"], source=shown)
    progress = mf.ProgressFile(p["progress_file"] or None, "download", label)
    try:
        fetch = _from_hf if p["source"] == "huggingface" else _from_url
        result = fetch(module, progress, secrets)
    except mf.FetchError as exc:
        module.fail_json(msg=f"download of {shown} failed: {exc}", dest=p["dest"], source=shown)
    if progress.error:
        module.warn(progress.error)
    module.exit_json(source=shown, **result)


if __name__ == "__main__":
    main()
