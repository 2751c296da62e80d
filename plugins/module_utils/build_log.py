# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The failure class of a vLLM source build log, with its fix: one table for every caller.

Module ``vllm_build`` classifies the log of the build it ran; module ``diagnose_classify``
classifies the build log tail (and the kernel log) a node's diagnose archive holds. Both
read :data:`TABLE` through :func:`classify`, so one log gets one class and one fix.

Each row is a class, its title, its fix, the patterns that recognise it in the build log
(and in the kernel log, where the kernel prints the cause) and where the matched texts come
from. Rows are in priority order: the first row with a matching line wins, and within a row
the last matching line is the one that decided it (the build stops soon after its cause).
A compiler killed by the OOM killer also prints "frontend command failed", so OOM comes
before the crash; a missing C++ standard header is a ``file not found`` too, so it comes
before the general missing dependency. Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The class when no row matched.
UNKNOWN = "unknown"
UNKNOWN_FIX = "No known build failure matched: read the build log tail."
#: How many matching lines a verdict keeps as evidence.
EVIDENCE_LINES = 3


@dataclass(frozen=True)
class BuildLogClass:
    """One row of the table."""

    cls: str
    title: str
    fix: str
    build_log: re.Pattern[str]
    sources: tuple[str, ...]
    kernel_log: re.Pattern[str] | None = None


@dataclass(frozen=True)
class BuildVerdict:
    """A classified log: the row's class, title and fix, the deciding line and the evidence."""

    cls: str
    title: str
    fix: str
    line: str | None
    evidence: tuple[str, ...] = ()


def _re(*alternatives: str) -> re.Pattern[str]:
    return re.compile("|".join(alternatives), re.IGNORECASE)


TABLE: tuple[BuildLogClass, ...] = (
    BuildLogClass(
        cls="build_patch_failure",
        title="a patch of the series does not apply (vLLM source build)",
        fix=(
            "A patch of the stack's series does not apply to this vLLM source: refresh it "
            "against this version (or drop it from the series), then rerun site.yml."
        ),
        build_log=_re(
            r"Hunk #\d+ FAILED",
            r"can't find file to patch",
            r"malformed patch",
            r"Reversed \(or previously applied\) patch detected",
            r"patch does not apply",
        ),
        sources=(
            "GNU patch messages (https://git.savannah.gnu.org/cgit/patch.git/tree/src/patch.c)",
            "git apply: 'patch does not apply' (https://git-scm.com/docs/git-apply)",
        ),
    ),
    BuildLogClass(
        cls="build_oom_kill",
        title="a compiler job was killed for memory (vLLM source build)",
        fix=(
            "The OOM killer stopped a compiler job: fewer parallel jobs - lower "
            "vllm_source_max_jobs or raise vllm_source_gib_per_job - then rerun site.yml."
        ),
        build_log=_re(
            r"Killed signal terminated program",
            r"unable to execute command: Killed",
            r"Out of memory",
            r"Cannot allocate memory",
            r"std::bad_alloc",
            r"(?:clang|hipcc|c\+\+|g\+\+|ninja).*\bKilled\b",
            r"exit (?:code|status) 137",
            r"signal 9\b",
        ),
        kernel_log=_re(r"Out of memory: Killed process \d+ \((?:clang|hipcc|cc1plus|ld|lld)"),
        sources=(
            "GCC driver: '<signal> signal terminated program cc1plus' (gcc/gcc.cc)",
            "clang driver: 'unable to execute command: Killed' (ROCm/hip#1291)",
            "kernel: 'Out of memory: Killed process N (clang-18)' (mm/oom_kill.c)",
            "exit status 137 = 128 + SIGKILL (POSIX shell exit status of a signalled child)",
        ),
    ),
    BuildLogClass(
        cls="build_compiler_crash",
        title="compile-time hipcc / clang crash (vLLM source build)",
        fix=(
            "hipcc crashed compiling vLLM's kernels: check that the stack's ROCm matches the "
            "installed /opt/rocm, lower vllm_source_max_jobs, and rebuild; the build log tail "
            "shows the crashing file."
        ),
        build_log=_re(
            r"frontend command failed due to signal",
            r"unable to execute command: Segmentation fault",
            r"internal compiler error",
            r"PLEASE submit a bug report",
            r"Segmentation fault",
            r"Stack dump:",
            r"LLVM ERROR",
            r"Illegal instruction",
            r"hipcc.*core dumped",
        ),
        sources=(
            "clang driver: 'clang frontend command failed due to signal' (ROCm/hcc#1178, "
            "ROCm/hip#1291)",
            "LLVM crash handler: 'PLEASE submit a bug report to', 'Stack dump:' "
            "(llvm/lib/Support/PrettyStackTrace.cpp)",
            "GCC: 'internal compiler error' (https://gcc.gnu.org/bugs/)",
        ),
    ),
    BuildLogClass(
        cls="build_cxx_headers_missing",
        title="hipcc cannot find the C++ standard headers (vLLM source build)",
        fix=(
            "hipcc cannot find the C++ standard headers: install build-essential and the "
            "libstdc++-dev of the newest GCC (vllm_source_toolchain_packages, e.g. "
            "libstdc++-14-dev), then rerun site.yml."
        ),
        # A C++ standard library header has no extension and no directory: 'cmath', 'string'.
        build_log=_re(r"fatal error: '[a-z_]+' file not found"),
        sources=(
            "clang: \"fatal error: 'cmath' file not found\" from hipcc on Ubuntu 24.04 without "
            "the newest GCC's libstdc++-dev (https://github.com/ROCm/ROCm/issues/4612)",
        ),
    ),
    BuildLogClass(
        cls="build_missing_dependency",
        title="a build tool, header or Python package is missing (vLLM source build)",
        fix=(
            "A tool, header or Python package the build needs is missing: check the stack's "
            "ROCm packages and the build requirements (the line shows which), then rerun "
            "site.yml."
        ),
        build_log=_re(
            r"ModuleNotFoundError",
            r"No module named",
            r"fatal error: [^:]+: No such file or directory",
            r"fatal error: '[^']+' file not found",
            r"Could NOT find",
            r"Could not find a package configuration file",
            r"command not found",
            r"No such file or directory: '[^']*(?:hipcc|cmake|ninja|nvcc)'",
            r"Failed to find ROCm",
            r"Compatibility with CMake < [\d.]+ has been removed",
            r"No matching distribution found",
        ),
        sources=(
            "Python: 'ModuleNotFoundError: No module named' (the import system)",
            "CMake: 'Could not find a package configuration file provided by', 'Could NOT "
            "find' (https://cmake.org/cmake/help/latest/command/find_package.html)",
            "CMake 4.0: 'Compatibility with CMake < 3.5 has been removed' "
            "(https://cmake.org/cmake/help/latest/release/4.0.html)",
            "pip: 'No matching distribution found'",
        ),
    ),
)
CLASSES: tuple[str, ...] = tuple(row.cls for row in TABLE)


def _matching(pattern: re.Pattern[str] | None, text: str) -> list[str]:
    if pattern is None:
        return []
    return [line.strip() for line in text.splitlines() if pattern.search(line)]


def row(cls: str) -> BuildLogClass:
    """The table row of ``cls`` (KeyError naming it when there is none)."""
    for candidate in TABLE:
        if candidate.cls == cls:
            return candidate
    raise KeyError(f"no build log class {cls!r}; known: {', '.join(CLASSES)}")


def verdict(cls: str, line: str | None, evidence: tuple[str, ...] = ()) -> BuildVerdict:
    """A verdict for ``cls`` (or :data:`UNKNOWN`) with the table's title and fix."""
    if cls == UNKNOWN:
        return BuildVerdict(UNKNOWN, "unknown build failure", UNKNOWN_FIX, line, evidence)
    found = row(cls)
    return BuildVerdict(found.cls, found.title, found.fix, line, evidence)


def classify(build_log: str, kernel_log: str = "") -> BuildVerdict:
    """The class of a failed build from its log (and the kernel log, when there is one).

    The first row whose patterns match a line wins; the deciding line is the last one it
    matched; the evidence is up to :data:`EVIDENCE_LINES` of its matching lines. No match:
    class :data:`UNKNOWN` with no line.
    """
    for candidate in TABLE:
        hits = _matching(candidate.build_log, build_log)
        hits += _matching(candidate.kernel_log, kernel_log)
        if hits:
            return verdict(candidate.cls, hits[-1], tuple(hits[-EVIDENCE_LINES:]))
    return verdict(UNKNOWN, None)
