# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for a service's environment: which entries are secrets, and how they are written to
a systemd EnvironmentFile. Each filter is documented in the YAML file of its name beside this
one (secret_env.yml, env_file_lines.yml). Usage::

    env | instinct.vllm.secret_env          -> the entries whose names look secret (HF_TOKEN)
    env | instinct.vllm.secret_env(false)   -> the others (for the unit's Environment= lines)
    env | instinct.vllm.env_file_lines      -> 'NAME=value' lines for an EnvironmentFile

A name looks secret when it contains KEY, TOKEN, SECRET, PASSWORD, PASSWD or CREDENTIAL (any
case): the rule diagnose redacts by (module_utils/diagnose.py, SECRET_NAME).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.instinct.vllm.plugins.module_utils.diagnose import SECRET_NAME

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BARE = re.compile(r"^[A-Za-z0-9_@+=:,./-]*$")
# Inside double quotes systemd's env-file parser takes these four after a backslash as themselves.
_ESCAPE = re.compile(r'(["\\`$])')


def _mapping(env: Any, name: str) -> Mapping[str, Any]:
    if not isinstance(env, Mapping):
        raise AnsibleFilterError(f"instinct.vllm.{name}: expects a dict of NAME: value")
    return env


def secret_env(env: Any, secret: bool = True) -> dict[str, Any]:
    """The entries of ``env`` whose names look secret (``secret``), or the others."""
    return {k: v for k, v in _mapping(env, "secret_env").items()
            if bool(SECRET_NAME.search(str(k))) == bool(secret)}


def env_file_lines(env: Any) -> str:
    """``NAME=value`` lines (sorted by name) as systemd's EnvironmentFile reads them back."""
    lines = []
    for name, value in sorted(_mapping(env, "env_file_lines").items()):
        text = str(value)
        if not _NAME.match(str(name)):
            raise AnsibleFilterError(f"instinct.vllm.env_file_lines: {name!r} is not a name")
        if re.search(r"[\x00-\x1f\x7f]", text):
            raise AnsibleFilterError(
                f"instinct.vllm.env_file_lines: the value of {name} has a control character")
        if not _BARE.match(text):
            text = '"' + _ESCAPE.sub(r"\\\1", text) + '"'
        lines.append(f"{name}={text}\n")
    return "".join(lines)


class FilterModule:
    """instinct.vllm service environment filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"secret_env": secret_env, "env_file_lines": env_file_lines}
