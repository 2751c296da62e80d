# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write each task's wall time to a file (the test harness's lane accounting).

When ``INSTINCT_TASK_TIMES`` names a file, every finished task appends one tab-separated
line: start (epoch seconds), seconds, playbook, ``check`` or ``run``, play, task, the
number of hosts that ran it, and the ansible-playbook process (one per playbook run).
Nothing goes to stdout, so playbooks whose output a test parses as JSON are not disturbed.
``scripts/task-times`` sums the lines.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ansible import context
from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: task_times
type: aggregate
short_description: each task's wall time into the file INSTINCT_TASK_TIMES names
description: A line per task (start, seconds, playbook, mode, play, task, hosts, run); no output.
requirements: [INSTINCT_TASK_TIMES in the environment]
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "task_times"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._out = os.environ.get("INSTINCT_TASK_TIMES", "")
        self._playbook = "-"
        self._play = "-"
        self._task: tuple[float, str] | None = None
        self._hosts = 0

    def _flush(self) -> None:
        if not self._out or self._task is None:
            return
        start, name = self._task
        mode = "check" if context.CLIARGS.get("check") else "run"
        fields = [
            f"{start:.3f}",
            f"{time.time() - start:.3f}",
            self._playbook,
            mode,
            self._play,
            name,
            str(self._hosts),
            str(os.getpid()),
        ]
        line = "\t".join(f.replace("\t", " ").replace("\n", " ") for f in fields)
        with open(self._out, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
        self._task = None

    def v2_playbook_on_start(self, playbook: Any) -> None:
        self._playbook = Path(playbook._file_name).name

    def v2_playbook_on_play_start(self, play: Any) -> None:
        self._flush()
        self._play = play.get_name().strip()

    def _start(self, task: Any) -> None:
        self._flush()
        self._task = (time.time(), task.get_name().strip())
        self._hosts = 0

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        self._start(task)

    def v2_playbook_on_handler_task_start(self, task: Any) -> None:
        self._start(task)

    def _count(self, result: Any, *args: Any, **kwargs: Any) -> None:
        self._hosts += 1

    v2_runner_on_ok = v2_runner_on_failed = v2_runner_on_skipped = _count
    v2_runner_on_unreachable = _count

    def v2_playbook_on_stats(self, stats: Any) -> None:
        self._flush()
