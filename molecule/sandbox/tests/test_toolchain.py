"""Role vllm's runtime toolchain on a bare Debian 12 node with APT's Recommends off (the sandbox
image has python3-pip but no gcc and no python3-dev, which python3-pip only recommends): its
check fails naming each package and the variable, the role's list installs them (apt, Debian's
archive, still without Recommends), then the check passes, for the cpu and the rocm platform."""

from __future__ import annotations

from pathlib import Path

PLAY = Path(__file__).with_name("toolchain.yml")


def test_toolchain_check_fails_on_a_bare_node_and_passes_after_the_install(
    host, ansible_run, podman_hostvars
):
    name = host.backend.name
    hosts = {name: podman_hostvars(name)}

    def run(stack: str, step: str):
        return ansible_run(
            PLAY, hosts, extravars={"instinct_vllm_stack": stack, "toolchain_step": step}
        )

    assert not host.exists("g++") and not host.file("/usr/include/python3.11/Python.h").exists
    assert host.package("python3-pip").is_installed
    assert not host.package("python3-dev").is_installed

    bare = run("cpu", "check")
    assert bare.rc != 0
    (msg,) = bare.failure_messages()
    assert "no working C++ compiler 'g++' on PATH" in msg, msg
    assert "install g++ (vllm_runtime_toolchain_packages.cpu)" in msg, msg
    assert "Python.h not found in /usr/include/python3.11" in msg, msg
    assert "install python3-dev (vllm_runtime_toolchain_packages.cpu)" in msg, msg

    bare_rocm = run("rocm-6.2.1", "check")
    assert bare_rocm.rc != 0
    (msg,) = bare_rocm.failure_messages()
    assert "no working C compiler 'gcc' on PATH" in msg, msg
    assert "install gcc (vllm_runtime_toolchain_packages.rocm)" in msg, msg
    assert "install g++ (vllm_runtime_toolchain_packages.rocm)" in msg, msg

    installed = run("cpu", "install")
    assert installed.rc == 0, installed.failure_messages()
    assert installed.count("changed") >= 1
    assert host.package("g++").is_installed and host.package("python3-dev").is_installed
    assert host.file("/etc/apt/apt.conf.d/99instinct-no-recommends").exists

    # rocm's list (gcc came with g++): nothing left to install, and its check passes
    rocm = run("rocm-6.2.1", "install")
    assert rocm.rc == 0, rocm.failure_messages()
    assert rocm.count("changed") == 0
