# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Diagnose a vLLM node: collect evidence (redacted), classify the failure, bundle archives.

Public facade over the private package ``_diagnose``:

* on the node: :class:`Settings`, :func:`default_specs`, :func:`collect`, :func:`private_dir`,
  :func:`write_evidence`, :func:`pack` (module ``diagnose_collect``);
* on the controller: :func:`classify`, :func:`bundle` (module ``diagnose_classify``);
* both: :class:`Redactor`, :data:`SECRET_NAME`, :data:`CLASSES`, :class:`Evidence`.
"""

from __future__ import annotations

from ansible_collections.instinct.vllm.plugins.module_utils._diagnose.bundle import (
    FINGERPRINT_FILE,
    LeakError,
    bundle,
    fingerprint_records,
    hosts_in,
    verdict_markdown,
)
from ansible_collections.instinct.vllm.plugins.module_utils._diagnose.classify import (
    CLASSES,
    Finding,
    classify,
)
from ansible_collections.instinct.vllm.plugins.module_utils._diagnose.collect import (
    STATUSES,
    Result,
    Settings,
    Spec,
    collect,
    default_specs,
    pack,
    run_spec,
    write_evidence,
)
from ansible_collections.instinct.vllm.plugins.module_utils._diagnose.evidence import Evidence
from ansible_collections.instinct.vllm.plugins.module_utils._diagnose.private import (
    UnsafeDirectory,
    private_dir,
)
from ansible_collections.instinct.vllm.plugins.module_utils._diagnose.redact import (
    SECRET_NAME,
    Redactor,
    env_file_secrets,
)

__all__ = [
    "CLASSES",
    "FINGERPRINT_FILE",
    "SECRET_NAME",
    "STATUSES",
    "Evidence",
    "Finding",
    "LeakError",
    "Redactor",
    "Result",
    "Settings",
    "Spec",
    "UnsafeDirectory",
    "bundle",
    "classify",
    "collect",
    "default_specs",
    "env_file_secrets",
    "fingerprint_records",
    "hosts_in",
    "pack",
    "private_dir",
    "run_spec",
    "verdict_markdown",
    "write_evidence",
]
