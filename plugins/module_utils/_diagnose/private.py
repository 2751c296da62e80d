# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the collector (root) may write on a node: a directory no other user can change, and
files created new without following links. Standard library only.

A directory under /var/tmp can be made by any local user before root gets there; a link put in
it (``<host>.tar.gz`` -> /etc/shadow) would make root overwrite the link's target. So the
evidence directory is used only when this user made it or owns it alone, under parents nobody
else can rename it in, and every file is created with O_EXCL | O_NOFOLLOW.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import IO

_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeDirectory(Exception):
    """The evidence directory could be changed by another user; nothing was written."""


def _others_can_replace(st: os.stat_result, uid: int) -> str:
    """Why another user could add, rename or remove entries here ('' when nobody can)."""
    if st.st_uid not in (0, uid):
        return f"owned by uid {st.st_uid}"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        return f"writable by others (mode {stat.S_IMODE(st.st_mode):04o}, not sticky)"
    return ""


def private_dir(path: str | Path) -> Path:
    """``path`` as a directory only this user can change: made here (mode 0700) when absent.

    An existing one must be a real directory (not a link) owned by this user, writable by no
    one else; each parent must be owned by root or this user and, when others may write in it,
    sticky (as /tmp and /var/tmp are). Raises UnsafeDirectory otherwise.
    """
    uid = os.geteuid()
    path = Path(path)
    parent = Path(os.path.realpath(path.parent))
    for directory in (parent, *parent.parents):
        why = _others_can_replace(os.stat(directory), uid)
        if why:
            raise UnsafeDirectory(f"{path}: its parent {directory} is {why}")
    target = parent / path.name
    with contextlib.suppress(FileExistsError):
        os.mkdir(target, 0o700)
    st = os.lstat(target)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeDirectory(f"{path} exists and is not a directory (a link?)")
    if st.st_uid != uid or stat.S_IMODE(st.st_mode) & 0o022:
        raise UnsafeDirectory(
            f"{path} was made by someone else (uid {st.st_uid}, mode "
            f"{stat.S_IMODE(st.st_mode):04o}): another user could put links in it. Remove it, "
            "or choose another directory"
        )
    return target


def create_new(path: str | Path) -> IO[bytes]:
    """``path`` opened for writing as a new file (mode 0600): an existing file or link there is
    removed first (unlink removes the link, never its target); a link is never followed."""
    path = Path(path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return os.fdopen(os.open(path, _NEW_FILE, 0o600), "wb")
