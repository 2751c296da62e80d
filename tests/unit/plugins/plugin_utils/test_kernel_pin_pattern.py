"""The APT pin of role rocm's kernel pin: its package globs select the kernel packages (not the
meta packages), and its version pattern (stack_matrix.newer_kernel_pattern) matches every version
of a newer kernel and not the stack's own or older ones, as Python's re and POSIX grep -E read it
(APT compiles the pattern with regcomp, REG_EXTENDED)."""

from __future__ import annotations

import re
import shutil
import subprocess
from fnmatch import fnmatchcase
from pathlib import Path

import pytest
from ansible_collections.instinct.vllm.plugins.plugin_utils import stack_matrix as sm

TEMPLATE = Path(__file__).parents[4] / "roles/rocm/templates/kernel-pin.pref.j2"
NEWER = [
    "6.8.0-42.42",
    "6.8.0-100.100",
    "6.8.0-1015.16",
    "6.8.0-44.44+1",
    "6.8.0-50.51",
    "6.8.1-1.1",
    "6.11.0-19.19~24.04.1",
    "6.14.0-24.24~24.04.3",
    "7.0.0-1.1",
    "10.0.0-1.1",
]
NOT_NEWER = [
    "6.8.0-41.41",
    "6.8.0-41.42",
    "6.8.0-41.41+1",
    "6.8.0-31.31",
    "6.8.0-4.4",
    "6.5.0-100.100",
    "5.15.0-200.210",
    "6.8.0",
]
KERNEL_PACKAGES = [
    "linux-image-6.8.0-100-generic",
    "linux-image-unsigned-6.8.0-45-generic",
    "linux-modules-6.8.0-50-generic",
    "linux-modules-extra-6.8.0-52-generic",
    "linux-headers-6.8.0-44",
    "linux-headers-6.8.0-44-generic",
    "linux-image-6.11.0-19-generic",
]
OTHER_PACKAGES = ["linux-image-generic", "linux-generic", "linux-firmware", "linux-headers-generic",
                  "linux-tools-6.8.0-100-generic", "linux-libc-dev", "bash"]  # fmt: skip


def pin_globs() -> list[str]:
    line = next(ln for ln in TEMPLATE.read_text().splitlines() if ln.startswith("Package:"))
    return line.split(":", 1)[1].split()


def test_the_pin_selects_kernel_packages_by_name_and_no_meta_package() -> None:
    globs = pin_globs()
    assert [n for n in KERNEL_PACKAGES if not any(fnmatchcase(n, g) for g in globs)] == []
    assert [n for n in OTHER_PACKAGES if any(fnmatchcase(n, g) for g in globs)] == []
    # no regular expression on names: APT would match it against every package it knows
    assert not any(g.startswith("/") for g in globs)


@pytest.mark.parametrize("number", [0, 1, 8, 9, 10, 19, 41, 99, 100, 109, 1015])
def test_integer_pattern_matches_exactly_the_larger_numbers(number: int) -> None:
    pattern = re.compile(f"^{sm._int_greater_pattern(number)}$")
    for n in range(3000):
        assert bool(pattern.match(str(n))) is (n > number), (number, n)


def test_pattern_matches_newer_kernel_versions_only() -> None:
    pattern = re.compile(sm.newer_kernel_pattern("6.8.0-41"))
    assert [v for v in NEWER if not pattern.match(v)] == []
    assert [v for v in NOT_NEWER if pattern.match(v)] == []
    assert sm.newer_kernel_pattern("6.8.0-41-generic") == sm.newer_kernel_pattern("6.8.0-41")


@pytest.mark.skipif(shutil.which("grep") is None, reason="no grep")
def test_posix_extended_regex_reads_it_the_same() -> None:
    versions = "\n".join(NEWER + NOT_NEWER) + "\n"
    out = subprocess.run(
        ["grep", "-E", sm.newer_kernel_pattern("6.8.0-41")],
        input=versions,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    assert out == NEWER


@pytest.mark.parametrize("bad", ["6.8", "6.8.0", "latest", None, ""])
def test_a_release_without_an_abi_is_refused(bad: object) -> None:
    with pytest.raises(sm.StackError, match="newer_kernel_pattern"):
        sm.newer_kernel_pattern(bad)
