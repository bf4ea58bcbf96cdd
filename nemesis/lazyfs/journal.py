"""Namespace operations not yet durable, replayed in order onto the backing directory.

Invariant: the mount's namespace equals the backing directory's namespace with
every pending operation applied in order. So the paths an operation recorded
when it happened are exactly the backing paths when it is replayed, and any
prefix of the journal is a state the directory tree really went through (what a
journaling filesystem guarantees after a crash).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from nemesis.lazyfs.node import Node


@dataclass(frozen=True)
class Op:
    kind: str  # create | mkdir | unlink | rmdir | rename
    path: str  # mount path ("/a/b"); the source for rename
    dest: str = ""  # rename only
    node: Node | None = None  # create/mkdir only

    def describe(self) -> str:
        return f"{self.kind} {self.path}" + (f" -> {self.dest}" if self.dest else "")


class BackingTree:
    """The backing directory plus an index of which node each backing path holds."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.index: dict[str, Node] = {}

    def real(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def apply(self, op: Op) -> set[str]:
        """Replay one operation; returns the backing directories it changed."""
        real = self.real(op.path)
        if op.kind == "create":
            assert op.node is not None
            mode = stat.S_IMODE(op.node.mode)
            os.close(os.open(real, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode))
            self._adopt(op.path, op.node)
        elif op.kind == "mkdir":
            assert op.node is not None
            os.mkdir(real, stat.S_IMODE(op.node.mode))
            self._adopt(op.path, op.node)
        elif op.kind in ("unlink", "rmdir"):
            (os.unlink if op.kind == "unlink" else os.rmdir)(real)
            self._orphan(op.path)
        elif op.kind == "rename":
            os.rename(real, self.real(op.dest))
            self._orphan(op.dest)
            self._move(op.path, op.dest)
        else:
            raise ValueError(f"unknown journal operation {op.kind!r}")
        return {os.path.dirname(self.real(p)) for p in (op.path, op.dest) if p}

    def _adopt(self, path: str, node: Node) -> None:
        if os.geteuid() == 0:
            os.chown(self.real(path), node.uid, node.gid)  # the creator owns it, not the daemon
        node.backing = path
        node.durable_size = node.trunc_floor = 0
        self.index[path] = node

    def _orphan(self, path: str) -> None:
        node = self.index.pop(path, None)
        if node is not None:
            node.backing = None

    def _move(self, src: str, dest: str) -> None:
        prefix = src + "/"
        moved = [p for p in self.index if p == src or p.startswith(prefix)]
        for old in moved:
            node = self.index.pop(old)
            node.backing = dest + old[len(src) :]
            self.index[node.backing] = node
