"""Shared by every scenario's testinfra tests: on a failed test, print the journal of the units
the test module names in JOURNAL_UNITS, read from the host under test."""

from __future__ import annotations

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when != "call" or not report.failed:
        return report
    units = getattr(item.module, "JOURNAL_UNITS", [])
    host = item.funcargs.get("host")
    if not units or host is None:
        return report
    args = " ".join(f"-u {unit}" for unit in units)
    journal = host.run(f"journalctl --no-pager -n 200 {args}")
    report.sections.append((f"journal of {', '.join(units)}", journal.stdout or journal.stderr))
    return report
