"""Run a command inside a sandbox container without `podman exec`.

A `podman exec` costs the podman client, conmon and runc each time. Here the command enters
the container's namespaces (nsenter), joins its cgroups (so CPU and memory are charged to the
container), keeps only the container's capability bounding set (setpriv, run inside the
container) and its init's environment. The container's init PID is read with one
`podman inspect` and then kept, with its start time, while that process lives.

Two callers: the Ansible connection plugin (connection_plugins/sandbox_podman.py) and the
testinfra backend (testinfra_sandbox.py). Plain Python, no Ansible or testinfra imports.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import IO

# Linux capability numbers, as setpriv names them (linux/capability.h).
CAPS = [
    "chown", "dac_override", "dac_read_search", "fowner", "fsetid", "kill", "setgid", "setuid",
    "setpcap", "linux_immutable", "net_bind_service", "net_broadcast", "net_admin", "net_raw",
    "ipc_lock", "ipc_owner", "sys_module", "sys_rawio", "sys_chroot", "sys_ptrace", "sys_pacct",
    "sys_admin", "sys_boot", "sys_nice", "sys_resource", "sys_time", "sys_tty_config", "mknod",
    "lease", "audit_write", "audit_control", "setfcap", "mac_override", "mac_admin", "syslog",
    "wake_alarm", "block_suspend", "audit_read", "perfmon", "bpf", "checkpoint_restore",
]
CGROUPS = Path("/sys/fs/cgroup")
# Where a container's Python keeps the code it compiled from Ansible's module zips (see
# PRELUDE).
CODE_CACHE = "/var/tmp/instinct-ansiballz"
PIDS = Path(os.path.expanduser("~/.ansible/sandbox-podman"))


class NotRunning(Exception):
    """The container has no running init process."""


def start_time(pid: str) -> str | None:
    """The process's start time (field 22 of /proc/PID/stat), or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def cgroup_files(pid: str) -> list[Path]:
    """The cgroup.procs files a process exec'd into the container joins (cgroup v1 and v2)."""
    files = []
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _num, controllers, path = line.split(":", 2)
        path = path.removesuffix("/init.scope")
        if controllers == "":
            base = CGROUPS / "unified" if (CGROUPS / "unified").is_dir() else CGROUPS
        else:
            base = CGROUPS / controllers.split(",")[0].removeprefix("name=")
        if (base / path.lstrip("/") / "cgroup.procs").exists():
            files.append(base / path.lstrip("/") / "cgroup.procs")
    return files


def bounding_set(pid: str) -> str:
    """setpriv's --bounding-set argument: the container init's capability bounding set."""
    line = next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines()
                if ln.startswith("CapBnd:"))  # fmt: skip
    mask = int(line.split()[1], 16)
    return ",".join(["-all"] + [f"+{name}" for bit, name in enumerate(CAPS) if mask >> bit & 1])


def init_pid(container: str, inspect: Callable[[], str]) -> str:
    """The container's init PID. `inspect` asks podman for it (and raises NotRunning when
    there is none); its answer is kept in PIDS while that process lives."""
    record = PIDS / container
    try:
        pid, started = json.loads(record.read_text())
        if start_time(pid) == started:
            return pid
    except (OSError, ValueError):
        pass
    pid = inspect().strip()
    if not pid.isdigit() or pid == "0":
        raise NotRunning(f"{container} is not running")
    PIDS.mkdir(parents=True, exist_ok=True)
    partial = record.parent / f"{record.name}.{os.getpid()}"  # written whole, renamed
    partial.write_text(json.dumps([pid, start_time(pid)]))
    partial.replace(record)
    return pid


def podman_inspect(container: str, podman: str = "podman") -> Callable[[], str]:
    """An `inspect` for init_pid that runs `podman inspect` on the container."""

    def inspect() -> str:
        done = subprocess.run([podman, "inspect", "--format", "{{.State.Pid}}", container],
                              capture_output=True, text=True, check=False)  # fmt: skip
        if done.returncode != 0:
            raise NotRunning(f"{container} is not running: {done.stderr.strip()}")
        return done.stdout

    return inspect


def enter(pid: str, argv: list[bytes], stdin: IO[bytes] | int | None,
          in_data: bytes | None = None) -> tuple[int, bytes, bytes]:
    """Run argv in the container whose init is `pid`: its namespaces, cgroups, bounding set
    and environment. Returns (rc, stdout, stderr)."""
    environ = [e for e in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if e]
    joins = cgroup_files(pid)

    def join() -> None:
        for procs in joins:
            procs.write_text(str(os.getpid()))

    command = [b"nsenter", b"-t", pid.encode(), b"-a", b"-r", b"-w", b"setpriv",
               f"--bounding-set={bounding_set(pid)}".encode(), b"env", b"-i",
               *environ, *argv]  # fmt: skip
    process = subprocess.Popen(command, stdin=stdin, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, preexec_fn=join)  # fmt: skip
    out, err = process.communicate(in_data)
    return process.returncode, out, err


# Ansible sends each module as a zip of its sources that Python imports with zipimport, which
# cannot keep bytecode: every task compiles ansible.module_utils again in the container. This
# prelude, run before the module, keeps each compiled module in CODE_CACHE, keyed by its path in
# the zip and its source, and points the code back at the path of this run's zip.
PRELUDE = """\
import __main__, base64


def _instinct_code_cache(directory):
    import hashlib, marshal, os, sys, types, zipimport

    compile_source = zipimport._compile_source

    def retarget(code, name):
        consts = tuple(retarget(c, name) if isinstance(c, types.CodeType) else c
                       for c in code.co_consts)
        return code.replace(co_filename=name, co_consts=consts)

    def cached(pathname, source):
        inner = pathname.rpartition(".zip")[2].encode()
        key = hashlib.sha256(inner + b"\\0" + source).hexdigest()
        path = os.path.join(directory, sys.implementation.cache_tag + "-" + key)
        try:
            with open(path, "rb") as f:
                return retarget(marshal.load(f), pathname)
        except Exception:
            pass
        code = compile_source(pathname, source)
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            with open(path + "." + str(os.getpid()), "wb") as f:
                marshal.dump(code, f)
            os.replace(path + "." + str(os.getpid()), path)
        except OSError:
            pass
        return code

    zipimport._compile_source = cached


try:
    _instinct_code_cache(%r)
except Exception:
    pass
del _instinct_code_cache
exec(compile(base64.b64decode(%r), "<stdin>", "exec", dont_inherit=True), __main__.__dict__)
"""


def with_code_cache(module: bytes, directory: str = CODE_CACHE) -> bytes:
    """A pipelined Ansible module (AnsiballZ) with the code-cache prelude in front of it;
    anything else unchanged, and nothing changed when INSTINCT_CODE_CACHE is `off` (what
    scripts/bench-connection compares against)."""
    if b"_ansiballz_main" not in module or os.environ.get("INSTINCT_CODE_CACHE") == "off":
        return module
    return (PRELUDE % (directory, base64.b64encode(module))).encode()
