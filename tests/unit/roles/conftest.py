"""The gateway on loopback (tests/unit/gateway_harness.py): one HAProxy and one stand-in node for
every test file of this directory that asks for them."""

from gateway_harness import gateway, gateway_node  # noqa: F401  # pytest fixtures
