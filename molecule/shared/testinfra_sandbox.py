"""testinfra backend `sandbox://NAME`: a sandbox container entered as the Ansible connection
enters it (sandbox_enter.py), instead of a `podman exec` for every command a test runs.

`sandbox://user@NAME` (another user) still goes through `podman exec -u`. molecule/conftest.py
registers the scheme; .config/molecule/config.yml makes it the verifier's connection.
"""

from __future__ import annotations

import subprocess
from typing import Any

import sandbox_enter
from testinfra.backend import base
from testinfra.backend.podman import PodmanBackend


class SandboxBackend(PodmanBackend):
    """A podman container, entered with nsenter when the command runs as root."""

    NAME = "sandbox"

    def run(self, command: str, *args: str, **kwargs: Any) -> base.CommandResult:
        if self.user not in (None, "root", "0"):
            return super().run(command, *args, **kwargs)
        cmd = self.get_command(command, *args)
        pid = sandbox_enter.init_pid(self.name, sandbox_enter.podman_inspect(self.name))
        argv = [b"/bin/sh", b"-c", self.encode(cmd)]
        rc, out, err = sandbox_enter.enter(pid, argv, subprocess.DEVNULL)
        result = self.result(rc, self.encode(cmd), out, err)
        result.command = self.encode(cmd)
        return result
