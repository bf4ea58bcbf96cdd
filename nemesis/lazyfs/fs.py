"""FUSE adapter: maps kernel requests onto the Store and injects I/O faults."""

from __future__ import annotations

import ctypes
import errno
import itertools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nemesis.lazyfs.faults import Faults
from nemesis.lazyfs.kernel import ATTR_TIMEOUT_S, KernelCache
from nemesis.lazyfs.libfuse import mfusepy
from nemesis.lazyfs.node import Node
from nemesis.lazyfs.store import Store

# Largest write the kernel may send in one request: big sequential appends (and the
# kernel's write-back) arrive as few large writes, each one Python call. (1 MiB made reads
# fail with EINVAL at random while libfuse 2 was loaded, now refused: libfuse.py.)
MAX_WRITE = 1 << 20
# Write-back requests the kernel keeps in flight: more only queue for the interpreter lock
# (Python runs one callback at a time) and delay the control thread's requests.
MAX_BACKGROUND = 2
FUSE_CAP_WRITEBACK_CACHE = 1 << 16  # fuse_common.h


@dataclass
class Handle:
    node: Node
    append: bool


def _fh(fip: Any) -> int | None:
    return fip.contents.fh if fip else None


UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2


def _ns(ts: Any) -> int | None:
    """A utimensat timespec in ns; None means leave unchanged."""
    if ts.tv_nsec == UTIME_OMIT:
        return None
    if ts.tv_nsec == UTIME_NOW:
        return time.time_ns()
    return ts.tv_sec * 1_000_000_000 + ts.tv_nsec


class LazyFUSE(mfusepy.FUSE):
    """mfusepy drops the file handle of setattr-style calls under libfuse 3; with
    nullpath_ok the path is then NULL too (ftruncate, fchmod, futimens), so pass it on."""

    def _path(self, path: bytes | None) -> str | None:
        return None if path is None else path.decode(self.encoding, self.errors)

    def truncate_fuse_3(self, path: bytes | None, length: int, fip: Any) -> int:
        return self.operations.truncate(self._path(path), length, _fh(fip))

    def chmod_fuse_3(self, path: bytes | None, mode: int, fip: Any) -> int:
        return self.operations.chmod(self._path(path), mode, _fh(fip))

    def chown_fuse_3(self, path: bytes | None, uid: int, gid: int, fip: Any) -> int:
        unset = 0xFFFFFFFF  # (uid_t)-1: leave unchanged
        return self.operations.chown(self._path(path), -1 if uid == unset else uid,
                                     -1 if gid == unset else gid, _fh(fip))

    # Direct I/O is chosen file by file (init turns the mount-wide switch off): without
    # write-back caching every file but the page-cached ones, which the kernel caches so they
    # can be mapped shared and writable; with it no file.
    def open(self, path: bytes, fip: Any) -> int:
        result = super().open(path, fip)
        fip.contents.direct_io = int(self.operations.is_direct_io(self._path(path)))
        return result

    def create(self, path: bytes, mode: int, fip: Any) -> int:
        result = super().create(path, mode, fip)
        fip.contents.direct_io = int(self.operations.is_direct_io(self._path(path)))
        return result

    def write(self, path: bytes | None, buf: Any, size: int, offset: int, fip: Any) -> int:
        """mfusepy copies the data into bytes first; a view of libfuse's buffer saves that
        copy (the store copies it into its cache and keeps no reference). `writepage` tells
        the kernel's write-back of cached pages from a process's own (direct) write."""
        fi = fip.contents
        data = memoryview((ctypes.c_char * size).from_address(ctypes.addressof(buf.contents))).cast("B")
        return self.operations.write(self._path(path), data, offset, fi.fh, bool(fi.writepage))

    def utimens_fuse_3(self, path: bytes | None, buf: Any, fip: Any) -> int:
        times = (_ns(buf.contents.actime), _ns(buf.contents.modtime)) if buf else None
        return self.operations.utimens(self._path(path), times, _fh(fip))


class LazyOps(mfusepy.Operations):
    use_ns = True

    def __init__(self, store: Store, on_ready: Callable[[], None] | None = None,
                 page_cached: tuple[str, ...] = (), kernel: KernelCache | None = None) -> None:
        self.store = store
        self.page_cached = page_cached
        self.kernel = kernel  # set: the kernel caches writes (FUSE write-back caching)
        self.faults = Faults()
        self.on_ready = on_ready  # called once the kernel has the mount
        self._handles: dict[int, Handle] = {}
        self._next_fh = itertools.count(1)
        self._lock = threading.Lock()

    # ---- lifecycle -------------------------------------------------------

    def init_with_config(self, conn_info: Any, config_3: Any) -> None:
        # Without write-back caching reads must reach us (the kernel page cache would hide a
        # power loss), and sizes must never be served from a stale kernel attribute cache.
        if config_3 is not None:
            config_3.direct_io = 0  # set per open instead: LazyFUSE.open
            config_3.kernel_cache = 0
            config_3.auto_cache = 0
            config_3.entry_timeout = 0.0
            config_3.attr_timeout = 0.0
            config_3.negative_timeout = 0.0
            config_3.hard_remove = 1
            config_3.nullpath_ok = 1
        if conn_info is not None:
            conn_info.max_write = MAX_WRITE
        if self.kernel is not None:
            self._enable_writeback(conn_info, config_3)
        if self.on_ready is not None:
            self.on_ready()

    def _enable_writeback(self, conn_info: Any, config_3: Any) -> None:
        assert self.kernel is not None
        if conn_info is None or config_3 is None or not conn_info.capable & FUSE_CAP_WRITEBACK_CACHE:
            raise RuntimeError("this kernel or libfuse offers no FUSE write-back caching; "
                               "mount with --no-writeback-cache")
        conn_info.want |= FUSE_CAP_WRITEBACK_CACHE
        conn_info.max_background = MAX_BACKGROUND
        # The kernel owns sizes and caches pages now; what it cached is made to forget a
        # power loss explicitly (kernel.py), so attributes may be cached between changes.
        config_3.attr_timeout = ATTR_TIMEOUT_S
        self.kernel.attach(config_3)

    def destroy(self, path: str) -> None:
        self.store.flush_all()  # a clean unmount is a clean shutdown

    # ---- handles -------------------------------------------------------

    def _new_handle(self, node: Node, flags: int) -> int:
        self.store.opened(node)
        with self._lock:
            fh = next(self._next_fh)
            # with write-back caching the kernel resolves O_APPEND and writes back at offsets
            self._handles[fh] = Handle(node, bool(flags & os.O_APPEND) and self.kernel is None)
        return fh

    def _handle(self, fh: int) -> Handle:
        handle = self._handles.get(fh)
        if handle is None:
            raise mfusepy.FuseOSError(errno.EBADF)
        if handle.node.generation != self.store.generation:
            # the file was open across a power loss: that process is gone
            raise mfusepy.FuseOSError(errno.EIO)
        return handle

    def _node(self, path: str | None, fh: int | None) -> Node:
        if fh:
            return self._handle(fh).node
        if path is None:
            raise mfusepy.FuseOSError(errno.EBADF)
        return self.store.lookup(path)

    # ---- attributes and namespace ---------------------------------------

    def getattr(self, path: str | None, fh: int | None = None) -> dict[str, int]:
        node = self._node(path, fh)
        if fh and self.faults.eio_write and self.kernel is not None and not node.is_dir:
            # with write-back caching the kernel asks this before a buffered write (kernel.py
            # keeps the attributes expired during the fault): the only place to fail it
            raise mfusepy.FuseOSError(errno.EIO)
        return node.attrs()

    def readdir(self, path: str | None, fh: int) -> list[str]:
        node = self._node(path, fh)
        return [".", "..", *self.store.readdir(node)]

    def mkdir(self, path: str, mode: int) -> int:
        uid, gid, _ = mfusepy.fuse_get_context()
        self.store.mkdir(path, mode, uid, gid)
        return 0

    def rmdir(self, path: str) -> int:
        self.store.rmdir(path)
        return 0

    def unlink(self, path: str) -> int:
        self.store.unlink(path)
        return 0

    def rename(self, old: str, new: str) -> int:
        self.store.rename(old, new)
        return 0

    def chmod(self, path: str | None, mode: int, fh: int | None = None) -> int:
        node = self._node(path, fh)
        self.store.set_attrs(node, mode=(node.mode & ~0o7777) | (mode & 0o7777))
        return 0

    def chown(self, path: str | None, uid: int, gid: int, fh: int | None = None) -> int:
        node = self._node(path, fh)
        self.store.set_attrs(node, uid=node.uid if uid < 0 else uid, gid=node.gid if gid < 0 else gid)
        return 0

    def utimens(self, path: str | None, times: tuple[int | None, int | None] | None = None,
                fh: int | None = None) -> int:
        node = self._node(path, fh)
        atime, mtime = times if times is not None else (time.time_ns(),) * 2
        self.store.set_attrs(node, atime=node.atime if atime is None else atime,
                             mtime=node.mtime if mtime is None else mtime)
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self.store.tree.root)
        keys = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail", "f_namemax")
        return {k: getattr(st, k) for k in keys}

    # ---- files ---------------------------------------------------------

    def is_direct_io(self, path: str | None) -> bool:
        return self.kernel is None and not self.is_page_cached(path)

    def is_page_cached(self, path: str | None) -> bool:
        """Without write-back caching, whether a file is served through the kernel's page
        cache anyway (so it can be mapped): its writes still reach this store (as write-back),
        but a power loss cannot drop what the kernel holds until then (docs/lazyfs.md)."""
        return bool(path) and path.endswith(self.page_cached) if self.page_cached else False

    def create(self, path: str, mode: int, flags: int) -> int:
        uid, gid, _ = mfusepy.fuse_get_context()
        try:
            node = self.store.create(path, mode, uid, gid)
        except FileExistsError:
            if flags & os.O_EXCL:
                raise
            return self.open(path, flags)
        return self._new_handle(node, flags)

    def open(self, path: str, flags: int) -> int:
        node = self.store.lookup(path)
        if flags & os.O_TRUNC and flags & os.O_ACCMODE != os.O_RDONLY:
            self.store.truncate(node, 0)
        return self._new_handle(node, flags)

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        return self.store.read(self._handle(fh).node, offset, size)

    def write(self, path: str | None, data: bytes | memoryview, offset: int, fh: int,
              writeback: bool = False) -> int:
        handle = self._handles.get(fh)
        if handle is None:
            raise mfusepy.FuseOSError(errno.EBADF)
        if not writeback:
            self._handle(fh)  # EIO on a descriptor from before a power loss
        if self.faults.eio_write:
            raise mfusepy.FuseOSError(errno.EIO)
        return self.store.write(handle.node, offset, data, append=handle.append, writeback=writeback)

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        self.store.truncate(self._node(path, fh), length)
        return 0

    def flush(self, path: str | None, fh: int) -> int:
        return 0  # close() makes nothing durable

    def release(self, path: str | None, fh: int) -> int:
        with self._lock:
            handle = self._handles.pop(fh, None)
        if handle is not None:
            self.store.released(handle.node)
        return 0

    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        node = self._handle(fh).node
        self._fsync_faults()
        self.store.fsync(node)
        return 0

    def opendir(self, path: str) -> int:
        node = self.store.lookup(path)
        if not node.is_dir:
            raise mfusepy.FuseOSError(errno.ENOTDIR)
        return self._new_handle(node, 0)

    def releasedir(self, path: str | None, fh: int) -> int:
        return self.release(path, fh)

    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        self._fsync_faults()
        self.store.commit_journal()
        return 0

    def _fsync_faults(self) -> None:
        if self.faults.slow_fsync_ms:
            time.sleep(self.faults.slow_fsync_ms / 1000)
        if self.faults.eio_fsync:
            raise mfusepy.FuseOSError(errno.EIO)
