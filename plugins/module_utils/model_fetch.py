# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Put a model's files on the host with progress a poller can read, and errors without secrets.

* :func:`redact` removes credentials from a message: the ``user:pass@`` of a URL, secret-looking
  query parameters (``?token=``, ``X-Amz-Signature=`` ...), ``Authorization``/``Cookie``-style
  headers, bearer and Hugging Face tokens, and any value passed as a known secret.
* :class:`ProgressFile` writes ``{phase, label, done, total, started, updated}`` as JSON
  (atomically, at most once a second): role ``model`` runs the long steps asynchronously and
  reads this file while it polls (the ``instinct.vllm.progress_message`` filter formats it).
* :func:`download` streams an HTTP(S) URL into a file, checked against a ``sha256:<hex>``
  style checksum before it is renamed into place; :func:`hf_snapshot` downloads a Hugging Face
  snapshot, measuring the bytes on disk against the repository's file sizes.

Standard library only (``huggingface_hub`` is imported by the caller that passes it in).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, BinaryIO
from urllib.parse import parse_qsl, urlsplit

MASK = "***"
CHUNK = 4 * 1024 * 1024

_URL_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@?#]*@")
_SECRET_WORDS = r"token|key|secret|signature|sig|password|passwd|pwd|auth|credential|session"
_QUERY_SECRET = re.compile(
    rf"(?i)(?P<name>[?&;][^=&;\s#]*(?:{_SECRET_WORDS})[^=&;\s#]*=)[^&;\s#'\"]+"
)
_HEADER_SECRET = re.compile(
    r"(?i)(?P<name>\b(?:proxy-)?authorization|\bcookie|\bset-cookie|\bx-api-key|\bapi-key"
    r"|\bx-auth-token|\bprivate-token|\bx-amz-security-token)"
    r"(?P<sep>(?P<quote>['\"])?\s*[:=]\s*(?P<vquote>['\"])?)"
    r"(?P<value>(?(vquote)[^'\"\r\n]+|(?:(?:bearer|basic|digest|token)\s+)?[^\s,;}]+))"
)
_SCHEME_TOKEN = re.compile(r"(?i)\b(?P<scheme>bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{8,}")
_HTML_HEAD = re.compile(r"(?is)<(head|script|style)\b.*?</\1\s*>")
_HTML_TAG = re.compile(r"(?s)<[^>]*>")


def redact(text: Any, secrets: Iterable[Any] = ()) -> str:
    """``text`` with every credential replaced by ``***`` (see the module docstring)."""
    out = str(text)
    for secret in sorted(
        {str(s) for s in secrets if s and len(str(s)) >= 4}, key=len, reverse=True
    ):
        out = out.replace(secret, MASK)
    out = _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", out)
    out = _QUERY_SECRET.sub(lambda m: f"{m.group('name')}{MASK}", out)
    out = _HEADER_SECRET.sub(lambda m: f"{m.group('name')}{m.group('sep')}{MASK}", out)
    out = _HF_TOKEN.sub(f"hf_{MASK}", out)
    return _SCHEME_TOKEN.sub(lambda m: f"{m.group('scheme')} {MASK}", out)


def url_secrets(url: str) -> list[str]:
    """The credentials inside a URL: its user and password, and the values of query
    parameters whose name looks secret (what :func:`redact` removes from it)."""
    parts = urlsplit(str(url))
    found = [v for v in (parts.username, parts.password) if v]
    secret_name = re.compile(rf"(?i){_SECRET_WORDS}")
    found += [
        v for k, v in parse_qsl(parts.query, keep_blank_values=False) if secret_name.search(k)
    ]
    return found


def header_secrets(headers: Mapping[str, Any] | None) -> list[str]:
    """Every header value, and its parts after a scheme word (``Bearer <token>``)."""
    values: list[str] = []
    for value in (headers or {}).values():
        text = str(value)
        values.append(text)
        values.extend(text.split()[1:])
    return values


class ProgressFile:
    """JSON progress for a poller: written atomically (temp file + rename), at most every
    ``interval`` seconds unless ``force``; a file that cannot be written turns it off (the
    step itself goes on) and :attr:`error` says why."""

    def __init__(
        self,
        path: str | None,
        phase: str,
        label: str,
        interval: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path, self.phase, self.label = path, phase, label
        self.interval, self.clock = interval, clock
        self.started = clock()
        self.last = float("-inf")
        self.error = ""

    def update(self, done: int, total: int | None, force: bool = False) -> None:
        if not self.path:
            return
        now = self.clock()
        if not force and now - self.last < self.interval:
            return
        self.last = now
        data = {
            "phase": self.phase,
            "label": self.label,
            "done": int(done),
            "total": int(total) if total else None,
            "started": self.started,
            "updated": now,
        }
        tmp = f"{self.path}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as handle:
                json.dump(data, handle)
            os.replace(tmp, self.path)
        except OSError as exc:
            self.error = f"progress file {self.path} not written: {exc}"
            self.path = None


class FetchError(RuntimeError):
    """A download failed; the message is already redacted."""


def parse_checksum(checksum: str) -> tuple[str, str]:
    """``"sha256:<hex>"`` -> ``("sha256", "<hex>")``; FetchError naming the value otherwise."""
    algo, _sep, digest = str(checksum).partition(":")
    if algo not in ("sha256", "sha384", "sha512") or not re.fullmatch(r"[0-9a-fA-F]+", digest):
        raise FetchError(f"checksum must be sha256|sha384|sha512:<hex>, got {checksum!r}")
    return algo, digest.lower()


def file_digest(path: str, algo: str) -> str:
    digest = hashlib.new(algo)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def download(
    opener: Callable[[], tuple[BinaryIO, int | None]],
    dest: str,
    checksum: str,
    progress: ProgressFile,
    secrets: Iterable[str] = (),
) -> dict[str, Any]:
    """Stream ``opener()`` (a response and its Content-Length) into ``dest``.

    Returns ``{changed, dest, bytes, seconds}``. ``dest`` is left untouched unless the whole
    body arrived and matches ``checksum``; a file already there with that checksum is kept
    (``changed`` false, nothing fetched). Errors raise FetchError with secrets removed.
    """
    algo, want = parse_checksum(checksum)
    if os.path.exists(dest) and file_digest(dest, algo) == want:
        return {"changed": False, "dest": dest, "bytes": os.path.getsize(dest), "seconds": 0.0}
    part = f"{dest}.part"
    started = time.monotonic()
    try:
        response, total = opener()
        digest, done = hashlib.new(algo), 0
        with open(part, "wb") as out:
            for block in iter(lambda: response.read(CHUNK), b""):
                out.write(block)
                digest.update(block)
                done += len(block)
                progress.update(done, total)
            out.flush()
            os.fsync(out.fileno())
    except FetchError:
        _remove(part)
        raise
    except Exception as exc:  # (every failure becomes one redacted message)
        _remove(part)
        raise FetchError(redact(describe_error(exc), secrets)) from None
    progress.update(done, total, force=True)
    if total is not None and done != total:
        _remove(part)
        raise FetchError(f"the download ended after {done} of {total} bytes")
    got = digest.hexdigest()
    if got != want:
        _remove(part)
        raise FetchError(f"checksum mismatch: expected {algo}:{want}, got {algo}:{got}")
    os.replace(part, dest)
    return {
        "changed": True,
        "dest": dest,
        "bytes": done,
        "seconds": round(time.monotonic() - started, 3),
    }


def describe_error(exc: BaseException) -> str:
    """One line for an HTTP/URL/OS error: the status and reason, and the start of the body an
    HTTP error sent (servers often say there why: "token expired")."""
    code = getattr(exc, "code", None)
    if isinstance(code, int):
        body = ""
        reader = getattr(exc, "read", None)
        if callable(reader):
            try:
                body = reader(2048).decode("utf-8", "replace").strip()
            except Exception:  # (the body is a bonus)
                body = ""
        if body.startswith("<"):  # an HTML error page: its text, not its markup
            body = _HTML_TAG.sub(" ", _HTML_HEAD.sub(" ", body))
        reason = getattr(exc, "reason", "") or getattr(exc, "msg", "")
        text = f"HTTP {code} {reason}".strip()
        return f"{text}: {' '.join(body.split())[:500]}" if body else text
    reason = getattr(exc, "reason", None)
    return f"{type(exc).__name__}: {reason if reason is not None else exc}"


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def tree_bytes(root: str) -> int:
    """Bytes of every regular file under ``root`` (a download in progress included)."""
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total


def hf_snapshot(
    snapshot: Callable[[], Any],
    dest: str,
    marker_value: str,
    total: int | None,
    progress: ProgressFile,
    secrets: Iterable[str] = (),
    poll: float = 1.0,
) -> dict[str, Any]:
    """Run ``snapshot()`` (huggingface_hub.snapshot_download into ``dest``) in a thread,
    reporting the bytes under ``dest`` against ``total`` until it returns. A marker file
    records ``marker_value`` (``repo@revision``): the same value again is unchanged."""
    marker = os.path.join(dest, ".instinct-hf-snapshot")
    if os.path.exists(marker):
        with open(marker, encoding="utf-8") as handle:
            if handle.read() == marker_value:
                return {"changed": False, "dest": dest, "bytes": tree_bytes(dest)}
    failure: list[BaseException] = []

    def work() -> None:
        try:
            snapshot()
        except BaseException as exc:  # (handed to the caller's thread)
            failure.append(exc)

    started = time.monotonic()
    worker = threading.Thread(target=work, name="hf-snapshot", daemon=True)
    worker.start()
    while worker.is_alive():
        progress.update(tree_bytes(dest), total)
        worker.join(poll)
    if failure:
        raise FetchError(redact(describe_error(failure[0]), secrets))
    done = tree_bytes(dest)
    progress.update(done, total, force=True)
    with open(marker, "w", encoding="utf-8") as handle:
        handle.write(marker_value)
    return {
        "changed": True,
        "dest": dest,
        "bytes": done,
        "seconds": round(time.monotonic() - started, 3),
    }
