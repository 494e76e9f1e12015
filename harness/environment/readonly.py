"""A directory no process can write into, root included, and back: how the lab makes a Spark
query's checkpoint commit log fail as Spark really meets it (its own write raises), rather
than by raising an exception of its own.

As root - these machines run the lab as root - permissions stop nothing, so the directory gets
the filesystem's immutable attribute (``chattr +i``, e2fsprogs; ext4, xfs, btrfs keep it,
tmpfs does not). Otherwise its write permission is taken away. Measured with PySpark 4.2.0: the
batch's ``foreachBatch`` runs, then the query stops with Spark's own
``.../commits/.3.<uuid>.tmp (Operation not permitted)``.

An immutable directory cannot be deleted either, so whatever wipes an environment releases
every commit log under it first (``release_under``): a harness killed while a fault held one
leaves nothing that the next ``up`` or ``down`` cannot remove.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

CHATTR_TIMEOUT_S = 10.0


class NotHeld(RuntimeError):
    """The directory stayed writable (a filesystem without the immutable attribute)."""


def _as_root() -> bool:
    return os.geteuid() == 0


def _chattr(flag: str, directory: Path) -> str:
    """chattr's complaint, or "" when it did it."""
    try:
        done = subprocess.run(
            ["chattr", flag, str(directory)],
            capture_output=True,
            text=True,
            timeout=CHATTR_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return done.stderr.strip() if done.returncode else ""


def _writable(directory: Path) -> bool:
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".chaoslab-probe-"):
            return True
    except OSError:
        return False


def hold(directory: Path) -> None:
    """Make ``directory`` unwritable; NotHeld (and the directory as it was) if it stays
    writable."""
    directory.mkdir(parents=True, exist_ok=True)
    complaint = _chattr("+i", directory) if _as_root() else ""
    if not _as_root():
        directory.chmod(0o555)
    if _writable(directory):
        release(directory)
        raise NotHeld(
            f"{directory} stayed writable"
            + (f" (chattr +i: {complaint})" if complaint else "")
            + "; the checkpoint must be on a filesystem that keeps the immutable attribute "
            "(ext4, xfs, btrfs) when the lab runs as root"
        )


def release(directory: Path) -> None:
    """Make ``directory`` writable again (nothing to do if it is gone)."""
    if not directory.is_dir():
        return
    if _as_root():
        _chattr("-i", directory)
    else:
        directory.chmod(0o755)


def commit_log(checkpoint: Path | str) -> Path:
    """The directory a Spark query writes its batches' commits into."""
    return Path(checkpoint) / "commits"


def release_under(checkpoint_root: Path) -> None:
    """Release every query's commit log below ``checkpoint_root`` (before it is deleted)."""
    for checkpoint in checkpoint_root.glob("*"):
        release(commit_log(checkpoint))
