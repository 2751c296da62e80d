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
        cmd = self.encode(self.get_command(command, *args))
        pid = sandbox_enter.init_pid(self.name, sandbox_enter.podman_inspect(self.name))
        rc, out, err = sandbox_enter.enter(pid, [b"/bin/sh", b"-c", cmd], subprocess.DEVNULL)
        return self.result(rc, cmd, out, err)
