# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Secrets out of collected text: given values, values of secret-named variables in env files
and of ``NAME=value`` assignments with a secret-looking NAME anywhere, bearer tokens and Hugging
Face tokens. Standard library only."""

from __future__ import annotations

import re
from collections.abc import Iterable

#: Variable names whose values are secrets wherever they appear (env files, journal, unit).
SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
_ASSIGN = re.compile(r"^\s*(?:export\s+)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*(?P<value>.*?)\s*$")
#: ``NAME=value`` anywhere in a text (a unit's Environment= line, systemctl show, a journal line)
#: with an upper-case NAME that looks secret: the value goes, whether or not it was known.
#: Upper case only, so ``sort_keys=True`` and ``keyring==24.3`` stay.
_SECRET_ASSIGN = re.compile(
    r"\b(?P<name>[A-Z_][A-Z0-9_]*)=(?!=)(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"']+)"
)
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?i)(authorization:\s*bearer\s+)\S+"), r"\1<redacted>"),
    (re.compile(r"(?i)(--api-key[= ])\S+"), r"\1<redacted>"),
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}\b"), "<redacted:hf-token>"),
)
#: Values shorter than this are not treated as secrets (they would redact ordinary words).
MIN_SECRET_LEN = 6


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def env_file_secrets(text: str) -> dict[str, str]:
    """``NAME=value`` lines of an env file whose NAME looks secret -> {NAME: value}."""
    found: dict[str, str] = {}
    for line in (text or "").splitlines():
        match = _ASSIGN.match(line)
        if match and SECRET_NAME.search(match.group("name")):
            value = _unquote(match.group("value"))
            if len(value) >= MIN_SECRET_LEN:
                found[match.group("name")] = value
    return found


def _redact_assignment(match: re.Match[str]) -> str:
    name, value = match.group("name"), match.group("value")
    if not SECRET_NAME.search(name) or value.startswith("<redacted"):
        return match.group(0)
    return f"{name}=<redacted:{name}>"


class Redactor:
    """Replaces every known secret value, then the generic patterns."""

    def __init__(self, secrets: Iterable[str] = (), named: dict[str, str] | None = None) -> None:
        values: dict[str, str] = {}
        for value in secrets:
            if value and len(value) >= MIN_SECRET_LEN:
                values[value] = "<redacted>"
        for name, value in (named or {}).items():
            if value and len(value) >= MIN_SECRET_LEN:
                values[value] = f"<redacted:{name}>"
        # Longest first, so a secret that contains another is replaced whole.
        self._values = sorted(values.items(), key=lambda kv: -len(kv[0]))

    @property
    def count(self) -> int:
        return len(self._values)

    def add_env_file(self, text: str) -> None:
        extra = env_file_secrets(text)
        merged = dict(self._values)
        for name, value in extra.items():
            merged.setdefault(value, f"<redacted:{name}>")
        self._values = sorted(merged.items(), key=lambda kv: -len(kv[0]))

    def __call__(self, text: str) -> str:
        for value, mark in self._values:
            text = text.replace(value, mark)
        for pattern, repl in _PATTERNS:
            text = pattern.sub(repl, text)
        return _SECRET_ASSIGN.sub(_redact_assignment, text)

    def leaks(self, text: str) -> list[str]:
        """Marks of the known secrets still present in ``text`` (empty: clean)."""
        return [mark for value, mark in self._values if value in text]
