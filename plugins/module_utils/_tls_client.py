# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The client side of TLS to a vLLM node: the CA that signed the node's certificate and the
certificate (with its key) the client presents, shared by every module that calls a node.

`TLS_SPEC` and `TLS_REQUIRED_TOGETHER` are the modules' options (documented once, in the doc
fragment instinct.vllm.tls_client); `TlsClient` turns them into what each transport takes:
keyword arguments of ansible.module_utils.urls.open_url, an ssl.SSLContext and a urllib opener,
and the HTTP client of the OpenAI SDK. `tls_reason` names a TLS failure and what to set.
Standard library at import time; the OpenAI SDK only when its client is built.
"""

from __future__ import annotations

import ssl
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

TLS_SPEC: dict[str, dict[str, Any]] = {
    "ca_path": {"type": "path"},
    "client_cert": {"type": "path"},
    "client_key": {"type": "path", "no_log": False},
}
TLS_REQUIRED_TOGETHER: list[list[str]] = [["client_cert", "client_key"]]


class TlsConfigError(ValueError):
    """A CA bundle, certificate or key that cannot be loaded; the message names the file."""


@dataclass(frozen=True)
class TlsClient:
    """Paths on the module's host; None (or empty) - the system's trust, no client certificate."""

    ca_path: str | None = None
    client_cert: str | None = None
    client_key: str | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> TlsClient:
        """From a module's parameters (empty strings, as roles pass when TLS is off, are None)."""
        return cls(*(params.get(name) or None for name in ("ca_path", "client_cert", "client_key")))

    def open_url_kwargs(self) -> dict[str, str | None]:
        """Keyword arguments of open_url (and ansible.module_utils.urls.Request)."""
        return {"ca_path": self.ca_path, "client_cert": self.client_cert,
                "client_key": self.client_key}

    def ssl_context(self) -> ssl.SSLContext:
        """A client context: verifies the server against `ca_path` (or the system's CAs) and
        its name, and presents the client certificate when there is one."""
        try:
            ctx = ssl.create_default_context(cafile=self.ca_path)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(f"ca_path {self.ca_path}: cannot load the CA bundle: {exc}"
                                 ) from exc
        if self.client_cert:
            try:
                ctx.load_cert_chain(self.client_cert, keyfile=self.client_key)
            except (OSError, ssl.SSLError) as exc:
                raise TlsConfigError(f"client_cert {self.client_cert} / client_key "
                                     f"{self.client_key}: cannot load the certificate and key: "
                                     f"{exc}") from exc
        return ctx

    def urllib_opener(self) -> urllib.request.OpenerDirector:
        """A urllib opener with this context for https and no proxy (a node is asked directly)."""
        return urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                           urllib.request.HTTPSHandler(context=self.ssl_context()))

    def openai_http_client(self) -> Any:
        """The OpenAI SDK's HTTP client (its defaults: timeouts, limits) verifying with this
        context, for openai.OpenAI(http_client=...)."""
        import openai  # deferred: only the SDK's callers need it

        return openai.DefaultHttpxClient(verify=self.ssl_context())


_HINTS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("CERTIFICATE_REQUIRED", "certificate required", "PEER_DID_NOT_RETURN_A_CERTIFICATE"),
     "the server requires a client certificate (set client_cert and client_key)"),
    (("CERTIFICATE_VERIFY_FAILED",),
     "the server's certificate is not trusted or not for this address (set ca_path to the CA "
     "that signed it; the URL's host must be one of the certificate's names)"),
    (("UNKNOWN_CA", "BAD_CERTIFICATE", "CERTIFICATE_UNKNOWN", "UNSUPPORTED_CERTIFICATE"),
     "the server refused the client certificate (client_cert must be signed by the CA the "
     "server trusts)"),
    (("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE"),
     "the server does not speak TLS on this port, or the URL should be https"),
    (("HANDSHAKE_FAILURE",),
     "the TLS handshake failed (a server that requires a client certificate answers so when "
     "none is sent: set client_cert and client_key)"),
)


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc`, what caused it and a URLError's reason, outermost first."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo and len(seen) < 16:
        cur = todo.pop(0)
        if cur is None or any(cur is s for s in seen):
            continue
        seen.append(cur)
        reason = getattr(cur, "reason", None)
        todo += [reason if isinstance(reason, BaseException) else None, cur.__cause__,
                 cur.__context__]
    return seen


def _closed_hint(tls: TlsClient | None) -> str:
    """Why a server closes the connection in the handshake (it may send no alert first)."""
    if tls is None:
        return ("the server closed the connection during the TLS handshake (a server that "
                "requires a client certificate does so when none is sent, or one it does not "
                "trust)")
    if not tls.client_cert:
        return ("the server closed the connection during the TLS handshake: it requires a client "
                "certificate (set client_cert and client_key)")
    return (f"the server closed the connection during the TLS handshake: it may not trust the "
            f"client certificate {tls.client_cert}")


def tls_reason(exc: BaseException, tls: TlsClient | None = None) -> str:
    """'' when `exc` is not a TLS failure; else one line: what to set, then the TLS error.
    `tls`: what the client presented, to name what is missing when the server just closed."""
    for cur in _chain(exc):
        text = str(cur)
        is_tls = isinstance(cur, ssl.SSLError) or "SSL" in text or "certificate" in text.lower()
        if not is_tls:
            continue
        for needles, hint in _HINTS:
            if any(n in text for n in needles):
                return f"TLS: {hint}: {text}"
        if isinstance(cur, ssl.SSLEOFError) or "EOF occurred in violation of protocol" in text:
            return f"TLS: {_closed_hint(tls)}: {text}"
        if isinstance(cur, ssl.SSLError):
            return f"TLS: {text}"
    return ""
