# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of the modules that call a vLLM node over HTTPS with a client certificate."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  ca_path:
    description:
      - The CA bundle (PEM) that signed the node's certificate; the node's certificate and its
        name (the URL's host) are verified against it.
      - Unset or empty - the system's trusted CAs.
      - Used when the URL is C(https://).
    type: path
  client_cert:
    description:
      - The client certificate (PEM) presented to the node, for a node that requires one
        (mutual TLS). Set together with I(client_key); unset or empty - none is presented.
      - A node that requires a client certificate and gets none refuses the connection; the
        module's message then says so.
    type: path
  client_key:
    description:
      - The private key (PEM) of I(client_cert). Set together with I(client_cert).
    type: path
notes:
  - With I(client_cert), I(client_key) and I(ca_path) the module calls a node that serves only
    mutual TLS (an C(https://) URL); the node's certificate must name the URL's host.
"""
