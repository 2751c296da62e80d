# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Connection to a sandbox container: containers.podman.podman with module pipelining.

containers.podman's connection runs `podman exec` without `-i`, so it cannot pipe a module to
the remote Python and declares no pipelining: each task costs about five podman runs (mount,
mkdir, chmod, exec, rm), and podman serialises them on a busy test machine. With stdin
attached a module goes through one `podman exec`; files (copy, template) go through
`podman cp`. Only the Molecule scenarios use it (.config/molecule/config.yml).
"""

from __future__ import annotations

import shlex

from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.connection import ConnectionBase
from ansible_collections.containers.podman.plugins.connection.podman import (
    Connection as PodmanConnection,
)

DOCUMENTATION = """
    name: sandbox_podman
    short_description: A sandbox podman container, with module pipelining
    description:
      - containers.podman.podman with C(podman exec -i), so modules are piped to the remote
        Python (one podman run per task) and no container mount is made.
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
    """containers.podman.podman, piping modules through `podman exec -i`."""

    transport = "sandbox_podman"
    has_pipelining = True

    def _connect(self) -> Connection:
        # No `podman mount`: with no mount point, put_file and fetch_file use `podman cp`.
        ConnectionBase._connect(self)
        self._connected = True
        return self

    def exec_command(self, cmd: str, in_data: bytes | None = None, sudoable: bool = False):
        ConnectionBase.exec_command(self, cmd, in_data=in_data, sudoable=sudoable)
        args = ["exec"]
        if in_data is not None:
            args.append("-i")
        if self.user:
            args.extend(("--user", self.user))
        argv = shlex.split(to_native(cmd, errors="surrogate_or_strict"))
        return self._podman(args, argv, in_data)
