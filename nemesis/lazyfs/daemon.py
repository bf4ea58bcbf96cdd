"""The mount daemon: store, FUSE loop, control socket and background flusher."""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

from nemesis.lazyfs.control import Controller, ControlServer
from nemesis.lazyfs.flusher import Flusher
from nemesis.lazyfs.fs import LazyFUSE, LazyOps
from nemesis.lazyfs.kernel import KernelCache
from nemesis.lazyfs.mount import (
    MountOptions,
    is_mounted,
    pidfile_for,
    registry_file,
    remove_file,
    write_json,
)
from nemesis.lazyfs.store import Store

# glibc's mallopt parameters
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory(threshold: int = 256 << 20) -> None:
    """Cached data is freed at every flush and allocated again by the next writes; touching
    fresh pages cost more than the copy into them (1.5 ms per MiB against 0.15 on the
    benchmark machine). So allocations up to 64 MiB come from the heap, and up to
    `threshold` bytes freed at its top stay mapped for reuse (like a page cache's free
    pages). Only glibc has mallopt; elsewhere nothing changes."""
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:
        mallopt(M_MMAP_THRESHOLD, 64 << 20)
        mallopt(M_TRIM_THRESHOLD, threshold)


def run_foreground(opts: MountOptions) -> None:
    """Mount and serve until unmounted; flushes everything on a clean unmount."""
    for path, what in ((opts.backing, "backing directory"), (opts.mountpoint, "mountpoint")):
        if not os.path.isdir(path):
            raise NotADirectoryError(f"{what} {path!r} is not a directory")
    if is_mounted(opts.mountpoint):
        raise RuntimeError(f"{opts.mountpoint} is already mounted; run `umount` on it first")
    # Many FUSE threads contend for the interpreter lock under write-back; a shorter switch
    # interval keeps control requests (a power loss) from waiting behind them for long.
    sys.setswitchinterval(0.0005)
    keep_freed_memory()
    store = Store(opts.backing, sync_backing=opts.sync_backing, dirty_limit=opts.dirty_limit_bytes)
    kernel = KernelCache(opts.mountpoint) if opts.writeback_cache else None
    flusher = Flusher(store, opts.flush_interval_ms, kernel) if opts.flush_interval_ms > 0 else None
    registry = registry_file(opts.mountpoint)
    # Resolved before mounting: touching the mountpoint before init returns deadlocks.
    entry = {"pid": os.getpid(), "control": os.path.abspath(opts.control),
             "mountpoint": os.path.realpath(opts.mountpoint), "backing": os.path.realpath(opts.backing)}
    ops = LazyOps(store, page_cached=opts.page_cached, kernel=kernel)
    # Bound before mounting so a bad socket path fails here, not inside the FUSE init.
    server = ControlServer(opts.control, Controller(store, ops.faults, kernel))

    def on_ready() -> None:
        write_json(pidfile_for(opts.control), {"pid": os.getpid()})
        write_json(registry, entry)  # registry_file() checked the private directory above
        server.start()
        if flusher is not None:
            flusher.start()

    ops.on_ready = on_ready
    options: dict[str, Any] = {"foreground": True, "fsname": "lazyfs", "subtype": "lazyfs"}
    if os.getuid() == 0:
        options["allow_other"] = True  # brokers may run as another user
    try:
        LazyFUSE(ops, opts.mountpoint, **options)
    finally:
        if flusher is not None:
            flusher.stop()
        server.stop()
        remove_file(pidfile_for(opts.control))
        remove_file(registry)
