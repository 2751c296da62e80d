# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for polling long steps (docs: progress_message.yml, redact.yml beside this file).

Usage::

    progress | instinct.vllm.progress_message('downloading gpt-oss-120B', now)
      -> 'downloading gpt-oss-120B: 12.40 of 61.20 GB (20%), 410.0 MB/s, about 1 min 59 s left'
    error_text | instinct.vllm.redact([model_hf_token])
      -> the text with URL credentials, secret query values, auth headers and tokens as ***

``progress`` is what module_utils/model_fetch.ProgressFile writes: ``{phase, label, done,
total, started, updated}`` (bytes, seconds since the epoch).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.instinct.vllm.plugins.module_utils import model_fetch as mf

#: Seconds without an update after which the message says the step looks stalled.
STALE_AFTER = 60.0


def human_bytes(count: float) -> str:
    """Decimal units as the rest of the collection reports sizes: ``12.40 GB``, ``512.0 MB``."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return (
                f"{count / size:.2f} {unit}"
                if unit in ("TB", "GB")
                else f"{count / size:.1f} {unit}"
            )
    return f"{int(count)} B"


def human_duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``2 h 07 min``."""
    secs = max(0, round(seconds))
    if secs < 60:
        return f"{secs} s"
    if secs < 3600:
        return f"{secs // 60} min {secs % 60:02d} s"
    return f"{secs // 3600} h {secs % 3600 // 60:02d} min"


def _number(progress: Mapping[str, Any], key: str) -> float | None:
    value = progress.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def progress_message(progress: Any, label: Any = "", now: Any = None) -> str:
    """One line: what, bytes done (of total, percent), average rate, time left, staleness."""
    what = str(label or (progress or {}).get("label") or "working")
    if not isinstance(progress, Mapping) or _number(progress, "done") is None:
        return f"{what}: started, no progress reported yet"
    if not isinstance(now, (int, float)) or isinstance(now, bool):
        now = time.time()
    done = _number(progress, "done") or 0.0
    total = _number(progress, "total")
    started = _number(progress, "started")
    updated = _number(progress, "updated") or float(now)
    parts = [human_bytes(done)]
    if total:
        parts = [
            f"{human_bytes(done)} of {human_bytes(total)} ({min(100, int(100 * done / total))}%)"
        ]
    elapsed = updated - started if started is not None else 0.0
    rate = done / elapsed if elapsed > 0 else 0.0
    if rate > 0:
        parts.append(f"{human_bytes(rate)}/s")
        if total and total > done:
            parts.append(f"about {human_duration((total - done) / rate)} left")
    if started is not None:
        parts.append(f"{human_duration(float(now) - started)} elapsed")
    quiet = float(now) - updated
    if quiet > STALE_AFTER:
        parts.append(f"no progress for {human_duration(quiet)}")
    return f"{what}: {', '.join(parts)}"


def redact(text: Any, secrets: Any = None) -> str:
    """``text`` without credentials (module_utils/model_fetch.redact); ``secrets``: values that
    must go too (a token, a header value)."""
    if secrets is not None and (
        isinstance(secrets, (str, bytes)) or not hasattr(secrets, "__iter__")
    ):
        raise AnsibleFilterError("instinct.vllm.redact: secrets must be a list of strings")
    return mf.redact(text, list(secrets or []))


class FilterModule:
    """instinct.vllm progress and redaction filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"progress_message": progress_message, "redact": redact}
