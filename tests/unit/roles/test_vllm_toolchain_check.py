"""roles/vllm/files/instinct-vllm-toolchain-check and the role's toolchain_check entry point.

On this controller (gcc, g++, python3-dev) the check builds and imports a Python extension
with each compiler and passes; a PATH without g++, a g++ that fails, or an include directory
without Python.h makes it fail with a message naming the package and the variable. Through the
role (a local play), the stack's vllm.platform picks the list of vllm_runtime_toolchain_packages.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from local_play import run_local_playbook
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "roles" / "vllm" / "files" / "instinct-vllm-toolchain-check"
DEFAULTS = yaml.safe_load((ROOT / "roles" / "vllm" / "defaults" / "main.yml").read_text())
TOOLCHAIN = DEFAULTS["vllm_runtime_toolchain_packages"]
CPU_ARGS = ["--variable", "vllm_runtime_toolchain_packages.cpu",
            "--compiler", "c++:g++:g++", "--headers", "python3-dev"]  # fmt: skip
ROCM_ARGS = ["--variable", "vllm_runtime_toolchain_packages.rocm", "--compiler", "c:gcc:gcc",
             "--compiler", "c++:g++:g++", "--headers", "python3-dev"]  # fmt: skip

pytestmark = pytest.mark.skipif(
    not (shutil.which("gcc") and shutil.which("g++")),
    reason="needs gcc and g++ (apt-get install g++ python3-dev)",
)


def load_check() -> ModuleType:
    return load_script("instinct_vllm_toolchain_check", SCRIPT)


check = load_check()


def run_check(
    args: list[str], python: str = sys.executable, env: dict[str, str] | None = None
) -> tuple[int, dict]:
    done = subprocess.run(
        [python, str(SCRIPT), *args], capture_output=True, text=True, timeout=120,
        env={**os.environ, **(env or {})}, check=False,
    )  # fmt: skip
    assert done.stdout.strip(), done.stderr
    return done.returncode, json.loads(done.stdout.splitlines()[-1])


def path_with(tmp_path: Path, **tools: str) -> str:
    """A PATH directory holding only the named tools ({name: target})."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, target in tools.items():
        (bin_dir / name).symlink_to(target)
    return str(bin_dir)


def test_builds_and_imports_an_extension_with_gcc_and_gxx(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    rc, report = run_check(ROCM_ARGS, env={"TMPDIR": str(tmp)})
    assert rc == 0, report
    assert report["ok"] and report["problems"] == []
    assert report["checked"] == ["gcc", "g++", "Python.h (python3-dev)"]
    assert (Path(report["include_dir"]) / "Python.h").is_file()
    assert list(tmp.iterdir()) == []  # the temporary directory (sources, .so) is gone


def test_a_venv_finds_its_base_pythons_headers(tmp_path: Path) -> None:
    """vLLM's venv: sysconfig's 'venv' scheme points at the base Python's include directory."""
    base = "/usr/bin/python3"
    if not Path(base).exists():
        pytest.skip("no /usr/bin/python3")
    venv = tmp_path / "venv"
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    rc, report = run_check(CPU_ARGS, python=str(venv / "bin" / "python"))
    want = subprocess.run(
        [base, "-c", "import sysconfig; print(sysconfig.get_paths('posix_prefix')['include'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert report["include_dir"] == want
    assert report["python"] == str(venv / "bin" / "python")
    assert rc == (0 if (Path(want) / "Python.h").is_file() else 1), report


def test_no_gxx_on_path_names_the_package_and_the_variable(tmp_path: Path) -> None:
    # gcc runs the assembler and the linker from PATH
    path = path_with(tmp_path, **{t: shutil.which(t) or "" for t in ("gcc", "as", "ld")})
    rc, report = run_check(ROCM_ARGS, env={"PATH": path})
    assert rc == 1
    assert report["problems"] == [
        "no working C++ compiler 'g++' on PATH (torch inductor builds its C++ kernels with it): "
        "install g++ (vllm_runtime_toolchain_packages.rocm)"
    ]


def test_no_compiler_at_all_names_each(tmp_path: Path) -> None:
    rc, report = run_check(ROCM_ARGS, env={"PATH": path_with(tmp_path)})
    assert rc == 1
    assert [p.split(" on PATH")[0] for p in report["problems"]] == [
        "no working C compiler 'gcc'",
        "no working C++ compiler 'g++'",
    ]
    assert "install gcc (vllm_runtime_toolchain_packages.rocm)" in report["problems"][0]


def test_a_compiler_that_fails_is_reported_with_its_error(tmp_path: Path) -> None:
    fake = tmp_path / "fake-g++"
    fake.write_text("#!/bin/sh\necho 'fatal error: broken toolchain' >&2\nexit 1\n")
    fake.chmod(0o755)
    rc, report = run_check(CPU_ARGS, env={"PATH": path_with(tmp_path, **{"g++": str(fake)})})
    assert rc == 1
    (problem,) = report["problems"]
    assert problem.startswith("the C++ compiler 'g++' (")
    assert "could not build a Python extension with Python.h" in problem
    assert "fatal error: broken toolchain" in problem
    assert problem.endswith("install g++ (vllm_runtime_toolchain_packages.cpu)")


OWN = f"{sys.version_info.major}.{sys.version_info.minor}"


def distribution_python(tmp_path: Path, version: str) -> str:
    """A /usr/bin/python3 as Debian links it: python3 -> python3.X."""
    (tmp_path / "dist").mkdir(exist_ok=True)
    target = tmp_path / "dist" / f"python{version}"
    target.symlink_to(sys.executable)
    link = tmp_path / "dist" / "python3"
    link.symlink_to(target.name)
    return str(link)


def test_no_python_h_names_the_directory_and_the_package(tmp_path: Path) -> None:
    empty = tmp_path / "include" / "python3.11"
    empty.mkdir(parents=True)
    dist = distribution_python(tmp_path, OWN)  # the venv's Python is the distribution's
    rc, report = run_check(
        [*CPU_ARGS, "--include-dir", str(empty), "--distribution-python", dist]
    )
    assert rc == 1
    (problem,) = report["problems"]  # no build attempted: it would only repeat the cause
    assert problem.startswith(f"Python.h not found in {empty} (")
    assert problem.endswith("install python3-dev (vllm_runtime_toolchain_packages.cpu)")


def test_a_python_other_than_the_distributions_needs_its_own_headers(tmp_path: Path) -> None:
    """A venv from python3.12 on a host whose python3 is another: python3-dev is not it."""
    empty = tmp_path / "include"
    empty.mkdir()
    dist = distribution_python(tmp_path, "3.99")
    rc, report = run_check(
        [*ROCM_ARGS, "--include-dir", str(empty), "--distribution-python", dist]
    )
    assert rc == 1
    (problem,) = report["problems"]
    assert (
        f"install python{OWN}-dev (vllm_runtime_toolchain_packages.rocm); this Python is {OWN}"
        f" and python3-dev brings the headers of the distribution's python3 (3.99): list "
        f"python{OWN}-dev instead"
    ) in problem
    assert "install python3-dev" not in problem


def test_the_distributions_python_is_read_from_its_link(tmp_path: Path) -> None:
    assert check.distribution_python(Path(distribution_python(tmp_path, "3.12"))) == "3.12"
    assert check.distribution_python(tmp_path / "missing") is None
    # an unknown distribution python (not python3.X): the listed package stands
    assert check.headers_packages(["python3-dev"], None) == (["python3-dev"], "")
    assert check.headers_packages(["python3-dev"], OWN) == (["python3-dev"], "")
    assert check.headers_packages(["python3-dev"], "3.99")[0] == [f"python{OWN}-dev"]


def test_a_compiler_argument_needs_language_command_and_package() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--compiler", "fortran:gfortran:gfortran"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "expected LANGUAGE:COMMAND:PACKAGE" in done.stderr


def test_include_dir_maps_debians_posix_local_like_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def get_paths(scheme: str) -> dict[str, str]:
        asked.append(scheme)
        return {"include": f"/include/{scheme}"}

    monkeypatch.setattr(sysconfig, "get_default_scheme", lambda: "posix_local")
    monkeypatch.setattr(sysconfig, "get_paths", get_paths)
    assert check.python_include_dir() == Path("/include/posix_prefix")
    monkeypatch.setattr(sysconfig, "get_default_scheme", lambda: "venv")
    assert check.python_include_dir() == Path("/include/venv")
    assert asked == ["posix_prefix", "venv"]


def _stack_platforms() -> set[str]:
    stacks = yaml.safe_load((ROOT / "files" / "stacks.yml").read_text())["stacks"]
    return {s["vllm"]["platform"] for s in stacks.values() if "platform" in s.get("vllm", {})}


def test_every_platform_of_the_stacks_has_a_toolchain() -> None:
    assert _stack_platforms() - {"unspecified"} <= set(TOOLCHAIN)


def test_the_lists_provide_what_torch_and_triton_need() -> None:
    def provided(platform: str) -> set[str]:
        return {e.get("command", e["provides"]) for e in TOOLCHAIN[platform]}

    assert provided("cpu") == {"g++", "headers"}
    assert provided("rocm") == {"gcc", "g++", "headers"}


# ---- through the role: tasks_from toolchain_check in a local play -----------------------------

def role_play(tasks_from: str) -> str:
    """A local play that runs one task file of role vllm."""
    return f"""
- hosts: localhost
  gather_facts: false
  connection: local
  tasks:
    - ansible.builtin.include_role:
        name: instinct.vllm.vllm
        tasks_from: {tasks_from}
"""


PLAY = role_play("toolchain_check")


def run_role_check(tmp_path: Path, **variables: object) -> tuple[int, str]:
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    venv = Path(sys.executable).parent.parent  # this venv's bin/python runs the check
    variables = {"ansible_python_interpreter": sys.executable, "vllm_venv_path": str(venv),
                 **variables}  # fmt: skip
    done = run_local_playbook(play, variables)
    return done.returncode, done.stdout + done.stderr


def test_the_role_checks_the_stacks_platform_list(tmp_path: Path) -> None:
    rc, out = run_role_check(tmp_path, instinct_vllm_stack="rocm-7.2.1")
    assert rc == 0, out
    assert "gcc, g++, Python.h (python3-dev) build a Python extension against" in out


def test_the_roles_failure_names_the_package_and_the_variable(tmp_path: Path) -> None:
    rc, out = run_role_check(
        tmp_path,
        instinct_vllm_stack="cpu",
        vllm_runtime_toolchain_packages={**TOOLCHAIN, "cpu": [
            {"package": "g++", "provides": "compiler", "command": "no-such-g++", "language": "c++"},
            {"package": "python3-dev", "provides": "headers"},
        ]},
    )  # fmt: skip
    assert rc != 0, out
    assert "vLLM cannot build its kernels while serving" in out
    assert "no working C++ compiler 'no-such-g++' on PATH" in out
    assert "install g++ (vllm_runtime_toolchain_packages.cpu)" in out


def test_a_malformed_entry_fails_naming_the_variable(tmp_path: Path) -> None:
    rc, out = run_role_check(
        tmp_path,
        instinct_vllm_stack="cpu",
        vllm_runtime_toolchain_packages={"cpu": [{"package": "g++", "provides": "compiler"}]},
    )
    assert rc != 0, out
    assert "vllm_runtime_toolchain_packages: every entry is" in out
    assert '"package": "g++"' in out


# ---- the builder: tasks/source/headers.yml, before CMake runs ---------------------------------

BUILDER_PLAY = role_play("source/headers")


def run_builder_check(
    tmp_path: Path, python: str, target: str, **variables: object
) -> tuple[int, str]:
    play = tmp_path / "builder.yml"
    play.write_text(BUILDER_PLAY)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(python)
    done = run_local_playbook(play, {
        "ansible_python_interpreter": sys.executable, "vllm_venv_path": str(venv),
        "_vllm_source": {"target_device": target}, **variables,
    })  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def python_without_headers(tmp_path: Path) -> str:
    """This python, made to look for Python.h in an empty directory (a node without python3-dev)
    and taken for the distribution's python3, whatever the host's is (python3-dev its headers)."""
    wrapper = tmp_path / "python-no-headers"
    empty = tmp_path / "empty-include"
    empty.mkdir()
    dist = distribution_python(tmp_path, OWN)
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} "$@" --include-dir {empty} '
                       f'--distribution-python {dist}\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def test_the_rocm_builders_list_carries_the_python_headers() -> None:
    # cmake/utils.cmake: find_package(Python COMPONENTS Interpreter Development.Module ...)
    assert "python3-dev" in DEFAULTS["vllm_source_toolchain_packages"]
    assert "python3-dev" in DEFAULTS["vllm_source_cpu_toolchain_packages"]


def test_a_builder_with_the_headers_goes_on(tmp_path: Path) -> None:
    rc, out = run_builder_check(tmp_path, sys.executable, "rocm")
    assert rc == 0, out


def test_a_rocm_builder_without_the_headers_fails_naming_the_package(tmp_path: Path) -> None:
    rc, out = run_builder_check(tmp_path, python_without_headers(tmp_path), "rocm")
    assert rc != 0, out
    assert "cannot find the Python headers" in out
    assert "install python3-dev (vllm_source_toolchain_packages)" in out


def test_the_builders_message_names_the_lists_own_headers_package(tmp_path: Path) -> None:
    rc, out = run_builder_check(
        tmp_path, python_without_headers(tmp_path), "cpu",
        vllm_source_cpu_toolchain_packages=["build-essential", "python3.12-dev"],
    )  # fmt: skip
    assert rc != 0, out
    assert "install python3.12-dev (vllm_source_cpu_toolchain_packages)" in out


def test_the_empty_target_runs_no_cmake_and_is_not_checked(tmp_path: Path) -> None:
    rc, out = run_builder_check(tmp_path, python_without_headers(tmp_path), "empty")
    assert rc == 0, out
