"""Atomic and durable file writes: a crash leaves either the old file or the complete new one.

Run folders, schedules, results and reports are all written through these, so a run killed at
any point leaves every file it had written whole and checkable.

The harness and the checker run as root and write beside files other users may control (a
history in someone's folder, /tmp): nothing here ever follows a symlink or trusts a name it did
not create itself. Temporary files are made with O_EXCL under unpredictable names (mkstemp) and
renamed over their target (a rename replaces a symlink, it never writes through it); private
directories are made 0700 and their owner and mode are checked, with lstat, before use."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


class UnsafePathError(PermissionError):
    """A path the harness must not use: a symlink, or a directory someone else controls."""


def write_text_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Write `text` to a fresh temporary file beside `path`, fsync it, rename it over `path`.

    A symlink at `path` is replaced, never written through."""
    with atomic_output(path, mode) as f:
        f.write(text.encode("utf-8"))


@contextmanager
def atomic_output(path: Path, mode: int = 0o644) -> Iterator[IO[bytes]]:
    """A binary file that becomes `path` (durably, atomically) when the block ends without an
    exception; on an exception (a full disk...) the temporary file is removed and `path` is
    left as it was."""
    with atomic_outputs(path, mode=mode) as (f,):
        yield f


@contextmanager
def atomic_outputs(*paths: Path, mode: int = 0o644) -> Iterator[list[IO[bytes]]]:
    """atomic_output for several files that belong together (results and their loss table):
    none of them is replaced unless every one was written and synced."""
    made: list[tuple[Path, str, IO[bytes]]] = []
    try:
        for path in map(Path, paths):
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            made.append((path, tmp, os.fdopen(fd, "wb")))
            os.fchmod(fd, mode)
        yield [f for _, _, f in made]
        for _, _, f in made:
            f.flush()
            os.fsync(f.fileno())
            f.close()
        for path, tmp, _ in made:
            os.replace(tmp, path)
    except BaseException:
        for _, tmp, f in made:
            try:
                f.close()
            except OSError:
                pass  # a full disk fails the final flush too; the file goes anyway
            Path(tmp).unlink(missing_ok=True)
        raise
    for parent in dict.fromkeys(path.parent for path, _, _ in made):
        fsync_dir(parent)


def write_json_atomic(path: Path, data: Any) -> None:
    """write_text_atomic of indented JSON with a final newline."""
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")


def fsync_dir(directory: Path) -> None:
    """Make a directory's entries (a new or renamed file) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _describe(st: os.stat_result) -> str:
    return f"owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}"


def check_trusted_parents(path: Path) -> None:
    """Every directory above `path` is owned by root or by us, and nobody else can rename
    entries in it (not writable by group or others, unless sticky like /tmp): otherwise whoever
    controls a parent could swap `path` for something of theirs after we checked it."""
    me = os.geteuid()
    path = Path(os.path.abspath(path))
    for parent in reversed(path.parents):
        st = os.stat(parent)  # a symlinked parent (/tmp -> /private/tmp) is judged by its target
        lst = os.lstat(parent)
        for s in (st, lst):
            if s.st_uid not in (0, me):
                raise UnsafePathError(f"{parent} is owned by uid {s.st_uid}: refusing to use "
                                      f"{path} below it")
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            raise UnsafePathError(f"{parent} is writable by other users ({_describe(st)}): "
                                  f"refusing to use {path} below it")


def check_private_dir(path: Path) -> os.stat_result:
    """`path` is a real directory (not a symlink), owned by us, that only we can use."""
    path = Path(path)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(f"{path} is a symlink: refusing to use it as a private directory")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(f"{path} is not a directory: refusing to use it")
    if st.st_uid != os.geteuid():
        raise UnsafePathError(f"{path} is owned by uid {st.st_uid}, not {os.geteuid()}: someone "
                              "else created it; refusing to use it (remove it)")
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise UnsafePathError(f"{path} is accessible to other users ({_describe(st)}): refusing "
                              "to use it (remove it, or chmod 700 it)")
    check_trusted_parents(path)
    return st


def private_dir(path: Path) -> Path:
    """The directory `path`, created 0700 if missing; whether new or old it must pass
    check_private_dir (ours, 0700, not a symlink, under trusted parents)."""
    path = Path(path)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    check_private_dir(path)
    return path


def make_private_tempdir(prefix: str, parent: Path | None = None) -> Path:
    """A new, uniquely named 0700 directory (mkdtemp) under `parent` (default: the temp dir)."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


def remove_private_dir(path: Path, marker: str | None = None) -> bool:
    """Remove a directory tree we made: only when it is a real directory owned by us (and holds
    `marker`, when given). Symlinks inside are removed, never followed. True if removed."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        return False
    if marker is not None and not os.path.lexists(path / marker):
        return False
    shutil.rmtree(path, ignore_errors=True)
    return not os.path.lexists(path)


_KINDS = {stat.S_IFLNK: "a symlink", stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO",
          stat.S_IFCHR: "a device", stat.S_IFBLK: "a device", stat.S_IFSOCK: "a socket"}


def file_kind(mode: int) -> str | None:
    """What a file of this st_mode is, in words, or None for a regular file."""
    return None if stat.S_ISREG(mode) else _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def check_regular_file(path: Path) -> Path:
    """`path` if it is a regular file (or a symlink to one); a FIFO would block its reader for
    ever and a device could be read without end, so they are refused (OSError, one line)."""
    kind = file_kind(os.stat(path).st_mode)
    if kind is not None:
        raise OSError(f"{path} is {kind}, not a regular file: refusing to read it")
    return Path(path)
