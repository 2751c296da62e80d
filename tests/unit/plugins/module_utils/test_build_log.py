"""One build-log classifier (module_utils/build_log.py) for module vllm_build and diagnose.

Each build log in fixtures/diagnose (SOURCES.md there says where each message text comes
from) goes through both callers the way they run: vllm_build's run_build on a setup.py that
prints the log and fails, diagnose's classify on a node whose archive holds the log tail.
Both must give the log's class and the same fix.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from ansible_collections.instinct.vllm.plugins.module_utils import build_log
from ansible_collections.instinct.vllm.plugins.module_utils import diagnose as dg
from ansible_collections.instinct.vllm.plugins.module_utils._vllm_build import build as vb

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "diagnose"

#: build log fixture -> the class it shows.
LOGS = {
    "build_log_patch_hunk_failed.txt": "build_patch_failure",
    "build_log_oom_killed.txt": "build_oom_kill",
    "build_log_gcc_killed.txt": "build_oom_kill",
    "build_log_hipcc_segfault.txt": "build_compiler_crash",
    "build_log_cmath_missing.txt": "build_cxx_headers_missing",
    "build_log_torch_cmake_missing.txt": "build_missing_dependency",
}


def from_vllm_build(log: str, tmp_path: Path) -> tuple[str, str, str | None]:
    """(class, fix, deciding line) as module vllm_build returns them for a failed build."""
    src = tmp_path / "src"
    src.mkdir()
    (tmp_path / "recorded.log").write_text(log, encoding="utf-8")
    (src / "setup.py").write_text(
        f"import sys\nsys.stdout.write(open({str(tmp_path / 'recorded.log')!r}).read())\n"
        "sys.exit(1)\n"
    )
    out = vb.run_build(
        str(src), sys.executable, {}, str(tmp_path / "build.log"), str(tmp_path / "dist")
    )
    assert out["rc"] == 1
    return out["category"], out["hint"], out["evidence"]


def from_diagnose(log: str) -> tuple[str, str, list[str]]:
    """(class, fix, evidence) as diagnose_classify's verdict gives them for a node."""
    result = dg.classify(dg.Evidence.from_texts({"build_log_tail": log}), gpu_expected=False)
    if not result["findings"]:
        return result["primary"], "", []
    finding = result["findings"][0]
    return finding["cls"], finding["fix"], finding["evidence"]


@pytest.mark.parametrize("name", sorted(LOGS))
def test_both_callers_give_the_same_class_and_fix(name: str, tmp_path: Path) -> None:
    log = (FIX / name).read_text(encoding="utf-8")
    built_cls, built_fix, line = from_vllm_build(log, tmp_path)
    diag_cls, diag_fix, evidence = from_diagnose(log)
    assert (built_cls, diag_cls) == (LOGS[name], LOGS[name])
    assert built_fix == diag_fix == build_log.row(LOGS[name]).fix
    lines = [raw.strip() for raw in log.splitlines()]
    assert line in lines and line == evidence[-1]
    assert set(evidence) <= set(lines)


def test_every_class_has_a_recorded_log() -> None:
    assert set(LOGS.values()) == set(build_log.CLASSES)


def test_every_row_names_its_sources_and_a_fix() -> None:
    for row in build_log.TABLE:
        assert row.sources and all(source.strip() for source in row.sources), row.cls
        assert row.fix.endswith(".") and row.title, row.cls


def test_diagnose_lists_the_build_classes() -> None:
    assert set(build_log.CLASSES) <= set(dg.CLASSES)


def test_a_compiler_killed_in_the_kernel_log_is_an_oom_kill() -> None:
    kernel = (FIX / "kernel_log_build_oom.txt").read_text(encoding="utf-8")
    found = build_log.classify("ninja: build stopped: subcommand failed.\n", kernel)
    assert found.cls == "build_oom_kill" and found.line and "(clang-18)" in found.line


def test_a_killed_engine_in_the_kernel_log_is_not_a_build_failure() -> None:
    kernel = "kernel: Out of memory: Killed process 4242 (python3) total-vm:1kB\n"
    assert build_log.classify("", kernel).cls == build_log.UNKNOWN


def test_an_unmatched_log_is_unknown_in_both_callers(tmp_path: Path) -> None:
    log = "error: something else\n"
    assert from_vllm_build(log, tmp_path) == ("unknown", build_log.UNKNOWN_FIX, None)
    assert from_diagnose(log)[0] == "unknown"


def test_an_unknown_class_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(KeyError, match=re.escape("build_oom_kill")):
        build_log.row("build_hipcc_crash")
