"""An in-memory filesystem with the lossy filesystem's durability model (docs/lazyfs.md).

It implements the storage code's filesystem port (replication/fs.py), so `SegmentLog` and
`BrokerStore` run over it unchanged: their disk format, checkpoints and recovery.

- **File data.** Each file (an inode) has what processes see (its page cache) and what is
  durable; an fsync of the file, through any descriptor, makes the first the second. Writes,
  truncations and the size are page cache until then.
- **Namespace.** create, mkdir, unlink and rename (`replace`) change what processes see at
  once and are appended to one ordered journal. The whole journal is committed (made
  durable, in order) by an fsync of *any* directory, or by an fsync of a file whose creation
  is not durable yet -- lazyfs's rule, which is what ext4 and XFS do; it never makes less
  durable than POSIX promises (a fsync of the directory holding the entry).
- **power_loss()**: every file and the namespace go back to their durable state; unsynced
  writes, pending truncations and journal entries are lost.
- **torn_power_loss(rng)**: lazyfs's `torn --mode prefix`: a seeded prefix of the journal is
  committed, then each file whose creation is durable, in path order, keeps a seeded number
  of its unsynced bytes in offset order (an appended log is cut at a random point); pending
  truncations are lost.
- **page_cache_loss()**: the same loss as power_loss, under running processes.

After any loss every descriptor open at that moment (and its duplicates) fails with EIO on
every later use but close, as lazyfs's do; new opens work. `kill()` is a SIGKILL of the
process holding the descriptors: they are closed, the page cache survives.

Deterministic: descriptors are the lowest free ints from 3, listings are sorted, randomness
comes only from the rng passed in. Only regular files and directories, and only what the
storage code does (no rmdir, no rename of a directory, no O_EXCL or O_APPEND); permissions
and timestamps are not modelled.
"""

from __future__ import annotations

import errno
import os
import random
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

_ROOTS = frozenset({"/", "."})
# The access-mode bits of open's flags (PyPy's os module has no O_ACCMODE)
_ACCMODE = os.O_RDONLY | os.O_WRONLY | os.O_RDWR

# A namespace journal entry: ("create", path, inode), ("mkdir", path, None),
# ("unlink", path, None) or ("rename", source, target).
_Op = tuple[str, str, Any]


class _Inode:
    """A regular file: what processes see (`data`) and what is durable (`durable`).

    While the file has only grown since its last fsync (the append path of a log), the
    durable content is the first `synced` bytes of `data`, kept as a length: an fsync costs
    nothing and an append copies nothing. A write or truncation inside that prefix first
    copies it out (`_frozen`)."""

    __slots__ = ("data", "synced", "_frozen")

    def __init__(self, data: bytes = b"", synced: int | None = 0, frozen: bytes = b"") -> None:
        self.data = bytearray(data)
        self.synced = synced  # None: the durable content is _frozen
        self._frozen = frozen

    @property
    def durable(self) -> bytes:
        return bytes(self.data[: self.synced]) if self.synced is not None else self._frozen

    def sync(self) -> None:
        self.synced = len(self.data)
        self._frozen = b""

    def write(self, offset: int, data: bytes | memoryview) -> None:
        if offset > len(self.data):
            self.data.extend(bytes(offset - len(self.data)))
        self._touch(offset)
        self.data[offset : offset + len(data)] = data

    def resize(self, length: int) -> None:
        if length < len(self.data):
            self._touch(length)
            del self.data[length:]
        else:
            self.data.extend(bytes(length - len(self.data)))

    def copy(self) -> _Inode:
        return _Inode(self.data, self.synced, self._frozen)

    def reset(self, data: bytes) -> None:
        """After a loss: `data` is what processes see and what is durable."""
        self.data = bytearray(data)
        self.sync()

    def _touch(self, offset: int) -> None:
        """Bytes from `offset` on are about to change: keep the durable prefix if they are in it."""
        if self.synced is not None and offset < self.synced:
            self._frozen = bytes(self.data[: self.synced])
            self.synced = None


@dataclass(eq=False)
class _Handle:
    """An open file description, shared by a descriptor and its duplicates."""

    inode: _Inode | None  # None: a directory
    path: str
    writable: bool
    readable: bool
    lost: bool = False  # open across a loss: every use but close fails with EIO


@dataclass
class _Namespace:
    files: dict[str, _Inode] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)

    def copy(self) -> _Namespace:
        return _Namespace(dict(self.files), set(self.dirs))

    def apply(self, op: _Op) -> None:
        kind, path, arg = op
        if kind == "create":
            self.files[path] = arg
        elif kind == "mkdir":
            self.dirs.add(path)
        elif kind == "unlink":
            del self.files[path]
        else:  # rename
            self.files[arg] = self.files.pop(path)


def _error(code: int, path: object = None) -> OSError:
    return OSError(code, os.strerror(code), None if path is None else str(path))


def _key(path: Path | str) -> str:
    key = _KEYS.get(path)
    if key is None:
        key = _KEYS[path] = str(PurePosixPath(path))
    return key


# path -> its normal form: the storage code names the same few paths again and again
_KEYS: dict[Path | str, str] = {}


def _parent(key: str) -> str:
    parent = _PARENTS.get(key)
    if parent is None:
        parent = _PARENTS[key] = str(PurePosixPath(key).parent)
    return parent


# normal form -> its directory's: every file created (a checkpoint's scratch file each second,
# then its rename) asks it, and a path's parsing is cold code under PyPy (about 0.1 ms there)
_PARENTS: dict[str, str] = {}


class SimFs:
    """See the module docstring. Methods take and raise as `os` does (replication/fs.py)."""

    def __init__(self, visible: _Namespace | None = None, durable: _Namespace | None = None,
                 journal: list[_Op] | None = None) -> None:
        self._visible = visible or _Namespace()
        self._durable = durable or _Namespace()
        self._journal: list[_Op] = journal or []
        self._fds: dict[int, _Handle] = {}

    # -- the port: descriptors -----------------------------------------------------------

    def open(self, path: Path | str, flags: int, mode: int = 0o777) -> int:
        key = _key(path)
        access = flags & _ACCMODE
        if self._is_dir(key):
            if access != os.O_RDONLY:
                raise _error(errno.EISDIR, path)
            return self._new_fd(_Handle(None, key, writable=False, readable=True))
        if flags & os.O_DIRECTORY:
            raise _error(errno.ENOTDIR if key in self._visible.files else errno.ENOENT, path)
        inode = self._visible.files.get(key)
        if inode is None:
            if not flags & os.O_CREAT:
                raise _error(errno.ENOENT, path)
            self._require_dir(_parent(key), path)
            inode = _Inode()
            self._change(("create", key, inode))
        if flags & os.O_TRUNC and access != os.O_RDONLY:
            inode.resize(0)
        handle = _Handle(inode, key, writable=access != os.O_RDONLY,
                         readable=access != os.O_WRONLY)
        return self._new_fd(handle)

    def close(self, fd: int) -> None:
        if self._fds.pop(fd, None) is None:
            raise _error(errno.EBADF)

    def dup(self, fd: int) -> int:
        return self._new_fd(self._handle(fd))

    def pread(self, fd: int, n: int, offset: int) -> bytes:
        inode = self._file(fd, reading=True)
        return bytes(inode.data[offset : offset + n])

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        self._file(fd, reading=False).write(offset, data)
        return len(data)

    def ftruncate(self, fd: int, length: int) -> None:
        self._file(fd, reading=False).resize(length)

    def fsync(self, fd: int) -> None:
        handle = self._handle(fd)
        inode = handle.inode
        if inode is None or not self._creation_durable(inode):
            self._commit(len(self._journal))
        if inode is not None:
            inode.sync()

    # -- the port: paths -----------------------------------------------------------------

    def truncate(self, path: Path | str, length: int) -> None:
        self._inode_at(path).resize(length)

    def replace(self, src: Path | str, dst: Path | str) -> None:
        self._inode_at(src)
        if self._is_dir(_key(dst)):
            raise _error(errno.EISDIR, dst)
        self._require_dir(_parent(_key(dst)), dst)
        if _key(src) != _key(dst):
            self._change(("rename", _key(src), _key(dst)))

    def unlink(self, path: Path | str, missing_ok: bool = False) -> None:
        if missing_ok and _key(path) not in self._visible.files and not self._is_dir(_key(path)):
            return
        self._inode_at(path)
        self._change(("unlink", _key(path), None))

    def makedirs(self, path: Path | str) -> None:
        key = _key(path)
        if key in self._visible.files:
            raise _error(errno.EEXIST, path)
        if self._is_dir(key):
            return
        self.makedirs(_parent(key))
        self._change(("mkdir", key, None))

    def listdir(self, path: Path | str) -> list[str]:
        key = _key(path)
        self._require_dir(key, path)
        names = [p for p in (*self._visible.files, *self._visible.dirs) if _parent(p) == key]
        return sorted(PurePosixPath(p).name for p in names)

    def size(self, path: Path | str) -> int:
        return len(self._inode_at(path).data)

    def read_bytes(self, path: Path | str) -> bytes:
        return bytes(self._inode_at(path).data)

    # -- faults --------------------------------------------------------------------------

    def power_loss(self) -> dict[str, Any]:
        """Everything not durable is lost; descriptors open now fail with EIO from now on.
        Returns what was lost, as lazyfs's `lose-unsynced` reports it (see `_revert`)."""
        self._lose()
        return self._revert(None)

    def page_cache_loss(self) -> dict[str, Any]:
        """The page cache is lost under running processes (lazyfs's lose-unsynced while they
        run): the same state as power_loss; their descriptors fail with EIO from now on."""
        return self.power_loss()

    def torn_power_loss(self, rng: random.Random) -> dict[str, Any]:
        """A power loss in the middle of writeback (lazyfs's `torn --mode prefix`): a seeded
        prefix of the namespace journal and of each file's unsynced bytes reach the disk.
        Returns what was kept and lost, as lazyfs's `torn` reports it."""
        self._lose()
        keep = rng.randint(0, len(self._journal))
        kept = [_describe(op) for op in self._journal[:keep]]
        self._commit(keep)
        return {**self._revert(rng), "kept_metadata": kept}

    def copy(self) -> SimFs:
        """A scratch copy of the files and directories as they are now (page cache, durable
        state, pending namespace changes), with no descriptor open: nothing done to it
        changes this one."""
        twins: dict[_Inode, _Inode] = {}  # by identity: a renamed file is one inode

        def twin(inode: _Inode) -> _Inode:
            if inode not in twins:
                twins[inode] = inode.copy()
            return twins[inode]

        return SimFs(
            _Namespace({k: twin(v) for k, v in self._visible.files.items()},
                       set(self._visible.dirs)),
            _Namespace({k: twin(v) for k, v in self._durable.files.items()},
                       set(self._durable.dirs)),
            [(kind, path, twin(arg) if isinstance(arg, _Inode) else arg)
             for kind, path, arg in self._journal])

    def kill(self) -> None:
        """The process holding every open descriptor is SIGKILLed: they are closed; the
        page cache (file data and namespace) survives."""
        self._fds.clear()

    # -- internals -----------------------------------------------------------------------

    def _new_fd(self, handle: _Handle) -> int:
        fd = 3
        while fd in self._fds:
            fd += 1
        self._fds[fd] = handle
        return fd

    def _handle(self, fd: int) -> _Handle:
        handle = self._fds.get(fd)
        if handle is None:
            raise _error(errno.EBADF)
        if handle.lost:
            raise _error(errno.EIO)
        return handle

    def _file(self, fd: int, reading: bool) -> _Inode:
        handle = self._handle(fd)
        if handle.inode is None:
            raise _error(errno.EISDIR, handle.path)
        if not (handle.readable if reading else handle.writable):
            raise _error(errno.EBADF)
        return handle.inode

    def _is_dir(self, key: str) -> bool:
        return key in _ROOTS or key in self._visible.dirs

    def _require_dir(self, key: str, path: object) -> None:
        if not self._is_dir(key):
            raise _error(errno.ENOTDIR if key in self._visible.files else errno.ENOENT, path)

    def _inode_at(self, path: Path | str) -> _Inode:
        key = _key(path)
        inode = self._visible.files.get(key)
        if inode is None:
            raise _error(errno.EISDIR if self._is_dir(key) else errno.ENOENT, path)
        return inode

    def _change(self, op: _Op) -> None:
        self._visible.apply(op)
        self._journal.append(op)

    def _creation_durable(self, inode: _Inode) -> bool:
        return any(node is inode for node in self._durable.files.values())

    def _commit(self, count: int) -> None:
        """Make the first `count` journal entries durable, in order."""
        for op in self._journal[:count]:
            self._durable.apply(op)
        del self._journal[:count]

    def _lose(self) -> None:
        for handle in self._fds.values():
            handle.lost = True

    def _revert(self, rng: random.Random | None) -> dict[str, Any]:
        """Processes now see the durable namespace; each durable file keeps its durable data
        plus, with an rng, a seeded prefix of its unsynced bytes in offset order. Returns
        {"lost_bytes", "files": {path: {"unsynced_bytes", "kept_bytes", "lost_bytes"}} for
        each file with unsynced bytes, "dropped_metadata": [namespace changes lost]}; a file
        whose creation is lost loses all its bytes."""
        dropped = [_describe(op) for op in self._journal]
        self._journal.clear()
        files: dict[str, dict[str, int]] = {}
        durable = set(self._durable.files.values())  # inodes, by identity
        for path, inode in sorted(self._visible.files.items()):
            if inode not in durable and inode.data:
                files[path] = _lost(len(inode.data), 0)
        self._visible = self._durable.copy()
        for path, inode in sorted(self._durable.files.items()):
            unsynced, kept, cut = _torn_cut(inode, rng)
            if unsynced:
                files[path] = _lost(unsynced, kept)
            inode.reset(inode.data[:cut] + inode.durable[cut:])
        return {"lost_bytes": sum(f["lost_bytes"] for f in files.values()), "files": files,
                "dropped_metadata": dropped}


def _lost(unsynced: int, kept: int) -> dict[str, int]:
    return {"unsynced_bytes": unsynced, "kept_bytes": kept, "lost_bytes": unsynced - kept}


def _describe(op: _Op) -> str:
    kind, path, arg = op
    return f"rename {path} {arg}" if kind == "rename" else f"{kind} {path}"


def _torn_cut(inode: _Inode, rng: random.Random | None) -> tuple[int, int, int]:
    """(n, k, cut): the file's n bytes that differ from the durable data, the k of them
    that reach the disk (uniform in 0..n with an rng, else 0), and the position up to which
    the page cache reached the disk: just after the k-th of them (0 keeps only the durable
    data). Bytes equal to the durable ones are the same either way."""
    data, synced = inode.data, inode.synced
    if synced is not None:  # only appended since the last fsync: the common case
        n = len(data) - synced
        k = rng.randint(0, n) if rng is not None and n else 0
        return n, k, 0 if k == 0 else synced + k
    durable = inode.durable
    dirty = [i for i in range(len(data)) if i >= len(durable) or data[i] != durable[i]]
    k = rng.randint(0, len(dirty)) if rng is not None and dirty else 0
    return len(dirty), k, 0 if k == 0 else dirty[k - 1] + 1
