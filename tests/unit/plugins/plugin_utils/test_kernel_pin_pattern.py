"""The APT pin pattern of role rocm's kernel pin (stack_matrix.newer_kernel_pattern): every
kernel package newer than the stack's kernel matches, the stack's own and older ones do not,
as Python's re and POSIX grep -E (APT compiles the pattern with regcomp, REG_EXTENDED) read it."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from ansible_collections.instinct.vllm.plugins.plugin_utils import stack_matrix as sm

NEWER = [
    "linux-image-6.8.0-42-generic",
    "linux-image-6.8.0-100-generic",
    "linux-image-6.8.0-1015-azure",
    "linux-headers-6.8.0-44",
    "linux-headers-6.8.0-44-generic",
    "linux-modules-6.8.0-50-generic",
    "linux-modules-extra-6.8.0-52-generic",
    "linux-image-unsigned-6.8.0-45-generic",
    "linux-image-6.8.1-1-generic",
    "linux-image-6.11.0-19-generic",
    "linux-image-6.14.0-24-generic",
    "linux-image-7.0.0-1-generic",
    "linux-image-10.0.0-1-generic",
]
NOT_NEWER = [
    "linux-image-6.8.0-41-generic",
    "linux-headers-6.8.0-41-generic",
    "linux-headers-6.8.0-41",
    "linux-modules-extra-6.8.0-41-generic",
    "linux-image-6.8.0-31-generic",
    "linux-image-6.8.0-4-generic",
    "linux-image-6.5.0-100-generic",
    "linux-image-5.15.0-200-generic",
    "linux-image-generic",
    "linux-generic",
    "linux-firmware",
    "linux-tools-6.8.0-100-generic",
]


@pytest.mark.parametrize("number", [0, 1, 8, 9, 10, 19, 41, 99, 100, 109, 1015])
def test_integer_pattern_matches_exactly_the_larger_numbers(number: int) -> None:
    pattern = re.compile(f"^{sm._int_greater_pattern(number)}$")
    for n in range(3000):
        assert bool(pattern.match(str(n))) is (n > number), (number, n)


def test_pattern_matches_newer_kernels_only() -> None:
    pattern = re.compile(sm.newer_kernel_pattern("6.8.0-41"))
    assert [n for n in NEWER if not pattern.match(n)] == []
    assert [n for n in NOT_NEWER if pattern.match(n)] == []
    assert sm.newer_kernel_pattern("6.8.0-41-generic") == sm.newer_kernel_pattern("6.8.0-41")


@pytest.mark.skipif(shutil.which("grep") is None, reason="no grep")
def test_posix_extended_regex_reads_it_the_same() -> None:
    names = "\n".join(NEWER + NOT_NEWER) + "\n"
    out = subprocess.run(
        ["grep", "-E", sm.newer_kernel_pattern("6.8.0-41")],
        input=names,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    assert out == NEWER


@pytest.mark.parametrize("bad", ["6.8", "6.8.0", "latest", None, ""])
def test_a_release_without_an_abi_is_refused(bad: object) -> None:
    with pytest.raises(sm.StackError, match="newer_kernel_pattern"):
        sm.newer_kernel_pattern(bad)
