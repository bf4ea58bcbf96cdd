"""In-memory inode of the lossy filesystem: what a process sees, not what is durable."""

from __future__ import annotations

import os
import stat
import time

from nemesis.lazyfs.extents import DirtyExtents


class Node:
    """A file or directory as the mount shows it.

    `backing` is the node's path relative to the backing directory once its
    creation is durable (None before that, or after its removal became durable).
    For files, `durable_size` is the length of the backing file, `trunc_floor`
    the smallest size the file had since its last flush (backing bytes at or past
    it are stale), `size` the size processes see, `extents` the unflushed writes.
    """

    def __init__(self, mode: int, name: str = "", parent: Node | None = None) -> None:
        now = time.time_ns()
        self.mode = mode
        self.uid = os.getuid()
        self.gid = os.getgid()
        self.atime = self.mtime = self.ctime = now
        self.name = name
        self.parent = parent
        self.children: dict[str, Node] = {}
        self.backing: str | None = None
        self.size = 0
        self.durable_size = 0
        self.trunc_floor = 0
        self.extents = DirtyExtents()
        self.fd: int | None = None
        self.open_count = 0
        self.generation = 0  # the store generation (power-loss epoch) it belongs to

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)

    @property
    def is_dirty(self) -> bool:
        return bool(self.extents) or self.size != self.durable_size or (
            self.trunc_floor != self.durable_size
        )

    def path(self) -> str | None:
        """Path inside the mount, or None once unlinked."""
        parts: list[str] = []
        node: Node | None = self
        while node is not None and node.parent is not None:
            parts.append(node.name)
            node = node.parent
        if node is None or node.name != "/":
            return None
        return "/" + "/".join(reversed(parts))

    def label(self) -> str:
        """Name for reports: the mount path, or the last name of an unlinked file."""
        return self.path() or f"(unlinked) {self.name}"

    def attrs(self) -> dict[str, int]:
        nlink = 2 + sum(c.is_dir for c in self.children.values()) if self.is_dir else 1
        return {
            "st_mode": self.mode,
            "st_nlink": nlink,
            "st_size": self.size if not self.is_dir else 4096,
            "st_uid": self.uid,
            "st_gid": self.gid,
            "st_atime": self.atime,
            "st_mtime": self.mtime,
            "st_ctime": self.ctime,
            "st_blocks": (self.size + 511) // 512,
            "st_blksize": 4096,
        }

    def touch(self) -> None:
        self.mtime = self.ctime = time.time_ns()


def node_from_stat(st: os.stat_result, name: str, parent: Node | None, rel: str) -> Node:
    """A durable node loaded from the backing directory."""
    node = Node(st.st_mode, name, parent)
    node.uid, node.gid = st.st_uid, st.st_gid
    node.atime, node.mtime, node.ctime = st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns
    node.backing = rel
    if not node.is_dir:
        node.size = node.durable_size = node.trunc_floor = st.st_size
    return node
