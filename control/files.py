"""Atomic and durable file writes: a crash leaves either the old file or the complete new one.

Run folders, schedules, results and reports are all written through these, so a run killed at
any point leaves every file it had written whole and checkable.

The harness and the checker run as root and write beside files other users may control (a
history in someone's folder, /tmp): nothing here ever follows a symlink or trusts a name it did
not create itself. Temporary files are made with O_EXCL | O_NOFOLLOW under unpredictable names,
0600 until complete, through a descriptor of their directory, and renamed over their target there
(a rename replaces a symlink, it never writes through it); folders the harness writes into are
checked for owner, mode and symlinks, with lstat, before use (owned_dir, private_dir)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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


@dataclass
class _Scratch:
    """A file being written for `path`: a fresh name in the directory (`dir_fd`) that will
    hold it, renamed over `path` there when complete."""

    path: Path
    dir_fd: int
    name: str
    file: IO[bytes]


def _scratch(path: Path) -> _Scratch:
    # The directory is opened once and everything below goes through its descriptor: the
    # scratch file is renamed in the very directory it was made in, even if the path to it
    # is swapped meanwhile. O_EXCL | O_NOFOLLOW: a name planted first fails, never followed.
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        name = f".{path.name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=dir_fd)  # private until complete
    except BaseException:
        os.close(dir_fd)
        raise
    return _Scratch(path, dir_fd, name, os.fdopen(fd, "wb"))


def _discard(s: _Scratch) -> None:
    try:
        s.file.close()
    except OSError:
        pass  # a full disk fails the final flush too; the file goes anyway
    try:
        os.unlink(s.name, dir_fd=s.dir_fd)
    except FileNotFoundError:
        pass


@contextmanager
def atomic_outputs(*paths: Path, mode: int = 0o644) -> Iterator[list[IO[bytes]]]:
    """atomic_output for several files that belong together (results and their loss table):
    none of them is replaced unless every one was written and synced. This is the harness's
    one way to write a file: each is a private scratch file, made exclusively beside its
    target, given `mode` once complete and renamed over the target, so a symlink planted at
    the name is replaced, never written through."""
    made: list[_Scratch] = []
    try:
        try:
            for path in map(Path, paths):
                made.append(_scratch(path))
            yield [s.file for s in made]
            for s in made:
                s.file.flush()
                os.fsync(s.file.fileno())
                os.fchmod(s.file.fileno(), mode)
                s.file.close()
            for s in made:
                os.replace(s.name, s.path.name, src_dir_fd=s.dir_fd, dst_dir_fd=s.dir_fd)
        except BaseException:
            for s in made:
                _discard(s)
            raise
        for s in made:
            os.fsync(s.dir_fd)  # the rename, durable
    finally:
        for s in made:
            os.close(s.dir_fd)


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


def _check_own_dir(path: Path, loose: int, kind: str, fix: str) -> os.stat_result:
    """`path` is a real directory (not a symlink), owned by us, without any `loose` mode bit."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(f"{path} is a symlink: refusing to use it as {kind}")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(f"{path} is not a directory: refusing to use it")
    if st.st_uid != os.geteuid():
        raise UnsafePathError(f"{path} is owned by uid {st.st_uid}, not {os.geteuid()}: someone "
                              "else created it; refusing to use it (remove it)")
    if stat.S_IMODE(st.st_mode) & loose:
        raise UnsafePathError(f"{path} is {'accessible' if loose & 0o044 else 'writable'} to "
                              f"other users ({_describe(st)}): refusing to use it (remove it, "
                              f"or {fix} it)")
    return st


def check_private_dir(path: Path) -> os.stat_result:
    """`path` is a real directory (not a symlink), owned by us, that only we can use."""
    path = Path(path)
    st = _check_own_dir(path, 0o077, "a private directory", "chmod 700")
    check_trusted_parents(path)
    return st


def owned_dir(path: Path, mode: int = 0o755) -> Path:
    """The directory `path`, created with `mode` if missing (its missing parents too), for
    files the harness writes and later reads back or replaces (results, a translated history).
    Whether new or old it must be a real directory (not a symlink) owned by us that nobody
    else can write to, under trusted parents (check_trusted_parents): otherwise another user
    could point it, or swap it, at a folder of ours, and our writes would land there. Others
    may read it, unlike a private_dir."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    check_trusted_parents(path)
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        pass
    _check_own_dir(path, 0o022, "a folder to write into", "chmod go-w")
    return path


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
