# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Connection to a sandbox container: its namespaces entered directly, modules piped.

containers.podman's connection runs `podman exec` for each task (about five: mount, mkdir,
chmod, exec, rm), and each costs the podman client, conmon and runc (scripts/bench-connection
measures the difference; docs/benchmarks.md). This connection enters the container's
namespaces (nsenter), joins its cgroups, keeps only its capability bounding set (setpriv,
inside the container) and its environment, and pipes the module to the remote Python. The
container's init PID is read with `podman inspect` once and then kept while that process
lives. A task with another remote user goes through `podman exec -i`. Only the Molecule
scenarios use it (.config/molecule/config.yml).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import IO, Any

from ansible.errors import AnsibleConnectionFailure
from ansible.module_utils.common.text.converters import to_bytes, to_native
from ansible.plugins.connection import ConnectionBase
from ansible_collections.containers.podman.plugins.connection.podman import (
    Connection as PodmanConnection,
)

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
PIDS = Path(os.path.expanduser("~/.ansible/sandbox-podman"))


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


DOCUMENTATION = """
    name: sandbox_podman
    short_description: A sandbox podman container, entered with nsenter, with module pipelining
    description:
      - Enters the container's namespaces with nsenter, joins its cgroups and keeps its
        capability bounding set and environment; modules are piped to the remote Python.
        A remote user other than root goes through C(podman exec -i).
    options:
      remote_addr:
        description: The container's name or ID.
        default: inventory_hostname
        vars:
          - name: ansible_host
          - name: inventory_hostname
          - name: ansible_podman_host
      remote_user:
        description: The user commands run as inside the container.
        ini:
          - section: defaults
            key: remote_user
        env:
          - name: ANSIBLE_REMOTE_USER
        vars:
          - name: ansible_user
      podman_extra_args:
        description: Extra arguments to the podman command line.
        default: ''
        vars:
          - name: ansible_podman_extra_args
        env:
          - name: ANSIBLE_PODMAN_EXTRA_ARGS
      podman_executable:
        description: The podman executable.
        default: podman
        vars:
          - name: ansible_podman_executable
        env:
          - name: ANSIBLE_PODMAN_EXECUTABLE
"""


class Connection(PodmanConnection):
    """A sandbox container entered with nsenter; podman exec -i for another remote user."""

    transport = "sandbox_podman"
    has_pipelining = True

    def _connect(self) -> Connection:
        # No `podman mount`: files go through the container's own cat.
        ConnectionBase._connect(self)
        self._connected = True
        return self

    def _init_pid(self) -> str:
        """The container's init PID: kept in ~/.ansible while that process lives."""
        record = PIDS / self._container_id
        try:
            pid, started = json.loads(record.read_text())
            if start_time(pid) == started:
                return pid
        except (OSError, ValueError):
            pass
        rc, out, err = self._podman(["inspect", "--format", "{{.State.Pid}}"])
        pid = to_native(out).strip()
        if rc != 0 or not pid.isdigit() or pid == "0":
            raise AnsibleConnectionFailure(f"{self._container_id} is not running: {to_native(err)}")
        PIDS.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps([pid, start_time(pid)]))
        return pid

    def _enter(self, argv: list[str], stdin: IO[bytes] | int | None,
               in_data: bytes | None = None) -> tuple[int, bytes, bytes]:
        """Run argv in the container: its namespaces, cgroups, bounding set and environment."""
        pid = self._init_pid()
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        joins = cgroup_files(pid)

        def join() -> None:
            for procs in joins:
                procs.write_text(str(os.getpid()))

        command = ["nsenter", "-t", pid, "-a", "-r", "-w", "setpriv",
                   f"--bounding-set={bounding_set(pid)}", "env", "-i",
                   *[e for e in environ if e], *argv]  # fmt: skip
        process = subprocess.Popen([to_bytes(c) for c in command], stdin=stdin,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   preexec_fn=join)  # fmt: skip
        out, err = process.communicate(in_data)
        return process.returncode, out, err

    def exec_command(self, cmd: str, in_data: bytes | None = None, sudoable: bool = False) -> Any:
        ConnectionBase.exec_command(self, cmd, in_data=in_data, sudoable=sudoable)
        argv = shlex.split(to_native(cmd, errors="surrogate_or_strict"))
        if self.user and self.user not in ("root", "0"):
            attach = ["-i"] if in_data is not None else []
            return self._podman(["exec", *attach, "--user", self.user], argv, in_data)
        stdin = subprocess.PIPE if in_data is not None else subprocess.DEVNULL
        return self._enter(argv, stdin, in_data)

    def put_file(self, in_path: str, out_path: str) -> None:
        ConnectionBase.put_file(self, in_path, out_path)
        with open(in_path, "rb") as source:
            rc, _out, err = self._enter(["/bin/sh", "-c", 'cat > "$1"', "sh", out_path], source)
        if rc != 0:
            raise AnsibleConnectionFailure(f"put {out_path}: {to_native(err)}")

    def fetch_file(self, in_path: str, out_path: str) -> None:
        ConnectionBase.fetch_file(self, in_path, out_path)
        rc, out, err = self._enter(["cat", in_path], subprocess.DEVNULL)
        if rc != 0:
            raise AnsibleConnectionFailure(f"fetch {in_path}: {to_native(err)}")
        Path(out_path).write_bytes(out)
