"""Apply a patch series to a source tree, checking each patch first (GNU patch, -p1).

For each patch, in order:

1. ``patch --dry-run --forward -p1``: applies cleanly -> apply it for real;
2. otherwise ``patch --dry-run --reverse -p1``: the reverse applies cleanly -> it is already
   applied, leave it (a rerun of a half-applied or fully applied series changes nothing);
3. otherwise fail, naming the patch and showing patch's own output.

A failure stops the series before anything after it is touched. Standard library only.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

Runner = Callable[[Sequence[str], str], tuple[int, str]]


class PatchError(RuntimeError):
    """A patch of the series neither applies nor is already applied."""

    def __init__(self, name: str, output: str, results: list[dict[str, str]]) -> None:
        super().__init__(
            f"patch {name} does not apply (and is not already applied):\n{output.strip()}"
        )
        self.name = name
        self.output = output
        self.results = results


@dataclass
class SeriesResult:
    results: list[dict[str, str]] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(r["status"] in ("applied", "would_apply") for r in self.results)


def run(argv: Sequence[str], cwd: str) -> tuple[int, str]:
    """Run ``argv`` in ``cwd``; return (rc, stdout+stderr)."""
    proc = subprocess.run(
        list(argv),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    return proc.returncode, proc.stdout


def read_series(directory: str | Path) -> list[Path]:
    """Patches of a directory in order: its ``series`` file if present (one name a line,
    ``#`` comments), else every ``*.patch`` / ``*.diff`` sorted by name."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"patch directory {directory} does not exist")
    series = directory / "series"
    if series.is_file():
        names = [
            line.split("#", 1)[0].strip()
            for line in series.read_text(encoding="utf-8").splitlines()
        ]
        paths = [directory / n for n in names if n]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"{series} names missing patches: {', '.join(missing)}")
        return paths
    return sorted(p for p in directory.iterdir() if p.suffix in (".patch", ".diff"))


def apply_series(
    tree: str,
    patches: Sequence[str],
    check_mode: bool = False,
    runner: Runner = run,
    patch_cmd: str = "patch",
) -> SeriesResult:
    """Apply ``patches`` to ``tree`` in order (see the module docstring)."""
    result = SeriesResult()
    base = [patch_cmd, "-p1", "--batch", "--silent", "--no-backup-if-mismatch", "-i"]
    for patch in patches:
        name = Path(patch).name
        if check_mode and result.changed:
            # A later patch may build on an earlier one that check mode did not apply.
            result.results.append({"patch": name, "status": "pending"})
            continue
        rc, out = runner([*base, patch, "--dry-run", "--forward"], tree)
        if rc == 0:
            if check_mode:
                result.results.append({"patch": name, "status": "would_apply"})
                continue
            rc, out_apply = runner([*base, patch, "--forward"], tree)
            if rc != 0:
                raise PatchError(name, out_apply, result.results)
            result.results.append({"patch": name, "status": "applied"})
            continue
        rc_rev, _out = runner([*base, patch, "--dry-run", "--reverse"], tree)
        if rc_rev == 0:
            result.results.append({"patch": name, "status": "already_applied"})
            continue
        raise PatchError(name, out, result.results)
    return result
