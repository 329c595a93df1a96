"""Files written so that a crash, a kill, a full disk or a power cut never leaves a half-written one:
the bytes go to a temporary file in the same directory, are flushed and fsynced, and only then
renamed over the old file (rename is atomic within a file system), and the directory is synced so
the rename itself survives a power cut. A reader sees the old file or the new one, never a mix."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from .errors import EdgetrainError

# A save killed before its rename leaves its temporary file behind: .<name>.<pid>.<token>.partial (the
# token keeps two threads' saves to one path apart).
PARTIAL = ".partial"


def write_atomic(path: str | os.PathLike, data: bytes | str) -> None:
    """Replace `path` with `data` (str is written as UTF-8), durably. Raises OSError, with nothing
    changed at `path` and no temporary file left, when any step fails (an unwritable directory, a
    full disk, a file-size limit)."""
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    _remove_abandoned(path)
    partial = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}{PARTIAL}")
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(raw)
            while view:  # os.write may write less than asked (a signal, a pipe); a full disk raises
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    _sync_directory(path.parent)


def _sync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # a directory that cannot be opened cannot be synced (some platforms); the data is
        return  # on disk already, only the rename might not survive a power cut
    try:
        os.fsync(fd)
    except OSError:
        pass  # file systems that do not sync directories (some network ones) refuse; nothing to gain
    finally:
        os.close(fd)


def _remove_abandoned(path: Path) -> None:
    """Delete the temporary files of earlier saves to `path` whose process has died (killed mid-save),
    so repeated crashes cannot fill a small device's storage."""
    for partial in path.parent.glob(f".{path.name}.*{PARTIAL}"):
        pid = partial.name[len(path.name) + 2 :].split(".")[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            partial.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def write_artifact(path: Path, data: bytes | str) -> None:
    """write_atomic for the compiler's outputs: a failure is the user's one-line error."""
    try:
        write_atomic(path, data)
    except OSError as exc:
        raise EdgetrainError(f"cannot write {path}: {exc.strerror or exc}") from None
