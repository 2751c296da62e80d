# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Connection to a sandbox container: its namespaces entered directly, modules piped.

containers.podman's connection runs `podman exec` for each task (about five: mount, mkdir,
chmod, exec, rm), and each costs the podman client, conmon and runc (scripts/bench-connection
measures the difference; docs/benchmarks.md). This connection enters the container's
namespaces (nsenter), joins its cgroups, keeps only its capability bounding set (setpriv,
inside the container) and its environment, and pipes the module to the remote Python, with a
prelude that keeps the code compiled from the module's zip (sandbox_enter.PRELUDE). The
container's init PID is read with `podman inspect` once and then kept while that process
lives. A task with another remote user goes through `podman exec -i`. Only the Molecule
scenarios use it (.config/molecule/config.yml).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

from ansible.errors import AnsibleConnectionFailure
from ansible.module_utils.common.text.converters import to_bytes, to_native
from ansible.plugins.connection import ConnectionBase
from ansible_collections.containers.podman.plugins.connection.podman import (
    Connection as PodmanConnection,
)

# The entry itself is shared with the testinfra backend (molecule/shared/sandbox_enter.py);
# Ansible loads this file by path, so its directory's parent goes on sys.path.
if str(Path(__file__).resolve().parents[1]) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import sandbox_enter

DOCUMENTATION = """
    name: sandbox_podman
    short_description: A sandbox podman container, entered with nsenter, with module pipelining
    description:
      - Enters the container's namespaces with nsenter, joins its cgroups and keeps its
        capability bounding set and environment; modules are piped to the remote Python,
        and the code it compiles from their zips is kept in the container.
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
        """The container's init PID (sandbox_enter.init_pid keeps it while it lives)."""

        def inspect() -> str:
            rc, out, err = self._podman(["inspect", "--format", "{{.State.Pid}}"])
            if rc != 0:
                raise AnsibleConnectionFailure(f"{self._container_id}: {to_native(err)}")
            return to_native(out)

        try:
            return sandbox_enter.init_pid(self._container_id, inspect)
        except sandbox_enter.NotRunning as exc:
            raise AnsibleConnectionFailure(str(exc)) from exc

    def _enter(self, argv: list[str], stdin: IO[bytes] | int | None,
               in_data: bytes | None = None) -> tuple[int, bytes, bytes]:
        """Run argv in the container (sandbox_enter.enter)."""
        return sandbox_enter.enter(self._init_pid(), [to_bytes(a) for a in argv], stdin, in_data)

    def exec_command(self, cmd: str, in_data: bytes | None = None, sudoable: bool = False) -> Any:
        ConnectionBase.exec_command(self, cmd, in_data=in_data, sudoable=sudoable)
        argv = shlex.split(to_native(cmd, errors="surrogate_or_strict"))
        if self.user and self.user not in ("root", "0"):
            attach = ["-i"] if in_data is not None else []
            return self._podman(["exec", *attach, "--user", self.user], argv, in_data)
        if in_data is None:
            return self._enter(argv, subprocess.DEVNULL)
        # a module: its compiled module_utils kept in the container (sandbox_enter.PRELUDE)
        return self._enter(argv, subprocess.PIPE, sandbox_enter.with_code_cache(in_data))

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
