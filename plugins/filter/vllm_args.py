# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for vLLM server flags; the logic is in module_utils/vllm_args.

Each filter is documented in the YAML file of its name beside this one (vllm_args.yml,
vllm_flags.yml, systemd_argv.yml). Usage::

    vllm_service_server_flags | instinct.vllm.vllm_args
        -> ['--disable-log-stats', '--enforce-eager', '--tensor-parallel-size', '8', ...]
    vllm_service_server_flags | instinct.vllm.vllm_args(repeat=['middleware'])
    vllm_service_flags | instinct.vllm.vllm_flags(vllm_service_flags_extra)
        -> the effective flags, names normalised, the extra flags over the defaults
    argv_list | instinct.vllm.systemd_argv
        -> one string safe for a unit's ExecStart= (quotes, %% and $$ escaped)

Rules (see the module_utils docstring): ``_`` -> ``-``, sorted by flag name, ``true`` -> bare
flag, ``false``/``null`` -> omitted, lists -> ``--flag a b`` (or repeated for ``repeat``
flags), dicts -> JSON; ``api_key`` and ``model`` are refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.instinct.vllm.plugins.module_utils import vllm_args as va

_SYSTEMD_SAFE = re.compile(r"^[A-Za-z0-9_@+=:,./-]+$")


def vllm_args(flags: Any, repeat: Any = None) -> list[str]:
    """A dict of vLLM server flags -> argv list."""
    try:
        return va.flags_to_argv(flags, repeat)
    except va.VllmArgsError as exc:
        raise AnsibleFilterError(f"instinct.vllm.vllm_args: {exc}") from exc


def vllm_flags(flags: Any, *layers: Any, names: Any = None, repeat: Any = None) -> dict[str, Any]:
    """Flag layers (dicts, argv lists or command-line strings) -> the effective flags dict."""
    try:
        return va.merge_flags(flags, *layers, names=list(names or ()), repeat=repeat)
    except va.VllmArgsError as exc:
        raise AnsibleFilterError(f"instinct.vllm.vllm_flags: {exc}") from exc


def systemd_quote(word: Any) -> str:
    """One argv word quoted for a systemd ExecStart= line (no variable or specifier expansion)."""
    text = str(word)
    if re.search(r"[\x00-\x1f\x7f]", text):
        raise AnsibleFilterError(f"instinct.vllm.systemd_argv: control character in {text!r}")
    text = text.replace("%", "%%").replace("$", "$$")
    if text and _SYSTEMD_SAFE.match(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def systemd_argv(argv: Any) -> str:
    """An argv list -> one ExecStart= command line string."""
    if isinstance(argv, (str, bytes)) or not isinstance(argv, (list, tuple)):
        raise AnsibleFilterError("instinct.vllm.systemd_argv: expects a list of strings")
    return " ".join(systemd_quote(word) for word in argv)


class FilterModule:
    """instinct.vllm vLLM flag filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"vllm_args": vllm_args, "vllm_flags": vllm_flags, "systemd_argv": systemd_argv}
