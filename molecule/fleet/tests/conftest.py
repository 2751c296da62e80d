"""fleet scenario: print the rollout figures the tests record (counts of client requests)."""

from __future__ import annotations

from typing import Any

import pytest

_FIGURES = pytest.StashKey[list]()


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> list[str]:
    """Lines printed at the end of the run (terminal summary), e.g. the request counts."""
    return request.config.stash.setdefault(_FIGURES, [])


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    lines = config.stash.get(_FIGURES, [])
    if lines:
        terminalreporter.section("fleet: client requests through the gateway during the rollouts")
        for line in lines:
            terminalreporter.write_line(line)
