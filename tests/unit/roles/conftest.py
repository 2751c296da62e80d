"""The gateway on loopback (tests/unit/gateway_harness.py): one HAProxy and one stand-in node for
every test file of this directory that asks for them."""

from gateway_harness import (  # noqa: F401  # pylint: disable=unused-import  # pytest fixtures
    gateway,
    gateway_node,
)
