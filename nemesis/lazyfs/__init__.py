"""Lossy page-cache FUSE filesystem (LazyFS-style) for power-loss faults.

Writes stay in this filesystem's own memory until fsync, flush-all or a
background flush; `lose-unsynced` simulates a power loss. See docs/lazyfs.md.
"""

from nemesis.lazyfs.control import LazyFSClient, LazyFSError
from nemesis.lazyfs.mount import MountOptions, is_mounted, spawn_daemon, unmount

__all__ = ["LazyFSClient", "LazyFSError", "MountOptions", "is_mounted", "spawn_daemon", "unmount"]
