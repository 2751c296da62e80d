"""The roles as pytest parameters, a known gap marked as a strict xfail (it fails once mended)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROLES_DIR = Path(__file__).resolve().parents[2] / "roles"


def role_params(roles: Iterable[Path], known_gaps: Mapping[str, str]) -> list:
    """One parameter per role; a role named in ``known_gaps`` xfails (strict) with that reason."""
    return [
        pytest.param(r, marks=pytest.mark.xfail(strict=True, reason=known_gaps[r.name]))
        if r.name in known_gaps
        else r
        for r in roles
    ]
