"""The kernel's page cache in front of the store when FUSE write-back caching is on.

With write-back caching the kernel keeps written pages and file sizes of its own and hands
the daemon whole pages later (at fsync, close, its own writeback or memory pressure). Those
pages are unsynced data too: before a report, a flush or a torn loss the daemon pulls them
in (`syncfs` on the mount: it writes pages back and sends no fsync); a plain power loss
resets the store first and pulls them in after, to be dropped (Store.write, writeback).
After a power loss the kernel is made to forget what it held: every cached inode's pages
and attributes are invalidated, and a size the kernel still believes (with write-back
caching the kernel, not the daemon, owns a cached file's size) is set back by a truncate
through the mount.

Everything here goes through the mount, so it must run on a thread that is not serving a
FUSE request and does not hold the store's lock (the control and flusher threads).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable
from typing import Any

from nemesis.lazyfs.libfuse import mfusepy
from nemesis.lazyfs.mount import is_mounted

# Attributes may be cached this long: without it the kernel asks for them before every
# buffered write. Changes the kernel does not make itself are invalidated explicitly.
ATTR_TIMEOUT_S = 1.0

_libc = ctypes.CDLL(None)
_libfuse = mfusepy._libfuse
_libfuse.fuse_invalidate_path.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_libfuse.fuse_invalidate_path.restype = ctypes.c_int


class KernelCache:
    """One mount's kernel page cache, seen from its daemon."""

    def __init__(self, mountpoint: str) -> None:
        self.mountpoint = os.path.abspath(mountpoint)
        self._fuse: int | None = None  # struct fuse *, known once init ran
        self._config: Any = None  # libfuse's live struct fuse_config

    def attach(self, config: Any) -> None:
        """Called from init (a FUSE thread, so the context names this mount's struct fuse)."""
        self._fuse = _libfuse.fuse_get_context().contents.fuse
        self._config = config

    def push(self, open_files: Iterable[str] = ()) -> None:
        """Write every page the kernel holds back to the daemon (as unsynced data). Given the
        files processes hold open, wait until their pages have arrived, not only been sent."""
        if not is_mounted(self.mountpoint):
            return  # detached (lazy unmount): the path is the directory under it now
        fd = os.open(self.mountpoint, os.O_RDONLY | os.O_DIRECTORY)
        try:
            # Its error is not ours: it reports any page or timestamp the daemon refused
            # (from a descriptor a power loss ended, of a file since replaced), lost anyway.
            _libc.syncfs(fd)
        finally:
            os.close(fd)
        for path in open_files:
            self._settle(path)

    def _settle(self, path: str) -> None:
        """syncfs does not wait for FUSE's write-back requests to be answered (the kernel
        will not let a FUSE daemon hold up sync), so a reply could miss pages still in
        flight. A close waits for the file's (FUSE's flush writes its inode back, waiting),
        and sends the daemon a flush, which makes nothing durable."""
        try:
            os.close(os.open(os.path.join(self.mountpoint, path.lstrip("/")), os.O_RDONLY | os.O_NONBLOCK))
        except OSError:
            return  # gone or replaced since: its pages were written back or dropped with it

    def forget(self, path: str) -> bool:
        """Drop the kernel's pages and attributes of `path`; False if it caches no such inode."""
        if self._fuse is None:
            return False
        return _libfuse.fuse_invalidate_path(self._fuse, os.fsencode(path)) == 0

    def resync(self, stale: Iterable[str], files: dict[str, int], dirs: Iterable[str]) -> None:
        """After a power loss: forget the paths of the old namespace, then make every cached
        file of the new one show the store's size and contents, and every directory its entries."""
        dirs = list(dirs)
        for path in set(stale).difference(files, dirs):  # the others are forgotten below
            self.forget(path)
        for path in dirs:
            self.forget(path)
        for path, size in files.items():
            if self.forget(path):
                self._set_size(path, size)

    def _set_size(self, path: str, size: int) -> None:
        real = os.path.join(self.mountpoint, path.lstrip("/"))
        try:
            if os.stat(real).st_size != size:
                os.truncate(real, size)  # the store's size already: only the kernel changes
        except OSError:
            return  # gone again (a process raced us): nothing cached to correct
        self.forget(path)  # the stat refreshed the attributes; descriptors from before must re-ask

    def expire_attributes(self, expire: bool, paths: Iterable[str]) -> None:
        """While on, the kernel asks for a file's attributes before every buffered write, so
        the daemon can fail it (eio-write); off restores the cache timeout."""
        if self._config is not None:
            self._config.attr_timeout = 0.0 if expire else ATTR_TIMEOUT_S
        if expire:
            for path in paths:
                self.forget(path)
