"""The lossy filesystem's state: namespace, page cache, and what is durable.

Durable state is exactly the backing directory. Everything else (unflushed
writes, truncations, cached sizes, pending namespace operations) lives here in
memory and is lost by `lose_unsynced` or partly kept by `torn`. See
docs/lazyfs.md for the durability model. All public methods take `self.lock`.
"""

from __future__ import annotations

import errno
import os
import random
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from nemesis.lazyfs.journal import BackingTree, Op
from nemesis.lazyfs.node import Node, node_from_stat
from nemesis.lazyfs.torn import MODES, kept_pieces


def _err(code: int, path: str) -> OSError:
    return OSError(code, os.strerror(code), path)


def unchanged_prefix(data: bytes | memoryview, durable: bytes) -> int:
    """Length of the longest common prefix of a write and the durable bytes under it."""
    view = memoryview(data)
    lo, hi = 0, min(len(view), len(durable))
    while lo < hi:  # binary search: each probe is one C-level comparison
        mid = (lo + hi + 1) // 2
        if view[:mid] == durable[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _split(path: str) -> tuple[str, str]:
    parent, name = os.path.split(path.rstrip("/") or "/")
    return parent or "/", name


class Store:
    def __init__(self, backing: str, sync_backing: bool = True, dirty_limit: int = 0) -> None:
        if not os.path.isdir(backing):
            raise NotADirectoryError(f"backing directory {backing!r} does not exist")
        self.tree = BackingTree(backing)
        self.sync_backing = sync_backing
        self.dirty_limit = dirty_limit
        self.lock = threading.RLock()
        self.journal: list[Op] = []
        self.dirty: set[Node] = set()
        self.total_dirty = 0
        self.generation = 0
        self._with_fd: set[Node] = set()
        self.late_losses: dict[str, int] = {}
        # Cleared while a power loss waits for the lock: writes (the kernel writing back
        # pages, many threads) would otherwise keep taking it first, and are cheaper after.
        self.quiet = threading.Event()
        self.quiet.set()
        self.root = self._load()

    # ---- loading -------------------------------------------------------

    def _load(self) -> Node:
        """Rebuild the namespace from the backing directory (the durable state)."""
        self.tree.index.clear()
        root = node_from_stat(os.stat(self.tree.root), "/", None, "/")
        root.generation = self.generation
        self.tree.index["/"] = root
        self._load_dir(root, "/")
        return root

    def _load_dir(self, node: Node, rel: str) -> None:
        with os.scandir(self.tree.real(rel)) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                    continue  # only regular files and directories are modelled
                child_rel = os.path.join(rel, entry.name)
                child = node_from_stat(st, entry.name, node, child_rel)
                child.generation = self.generation
                node.children[entry.name] = child
                self.tree.index[child_rel] = child
                if child.is_dir:
                    self._load_dir(child, child_rel)

    # ---- lookup --------------------------------------------------------

    def lookup(self, path: str) -> Node:
        with self.lock:
            node = self.root
            for part in path.strip("/").split("/"):
                if not part:
                    continue
                if not node.is_dir:
                    raise _err(errno.ENOTDIR, path)
                child = node.children.get(part)
                if child is None:
                    raise _err(errno.ENOENT, path)
                node = child
            return node

    def _parent_of(self, path: str) -> tuple[Node, str]:
        parent_path, name = _split(path)
        parent = self.lookup(parent_path)
        if not parent.is_dir:
            raise _err(errno.ENOTDIR, path)
        return parent, name

    # ---- namespace operations -------------------------------------------

    def create(self, path: str, mode: int, uid: int, gid: int) -> Node:
        with self.lock:
            parent, name = self._parent_of(path)
            if name in parent.children:
                raise _err(errno.EEXIST, path)
            node = Node(stat.S_IFREG | stat.S_IMODE(mode), name, parent)
            node.generation = self.generation
            node.uid, node.gid = uid, gid
            parent.children[name] = node
            parent.touch()
            self.journal.append(Op("create", path, node=node))
            return node

    def mkdir(self, path: str, mode: int, uid: int, gid: int) -> None:
        with self.lock:
            parent, name = self._parent_of(path)
            if name in parent.children:
                raise _err(errno.EEXIST, path)
            node = Node(stat.S_IFDIR | stat.S_IMODE(mode), name, parent)
            node.generation = self.generation
            node.uid, node.gid = uid, gid
            parent.children[name] = node
            parent.touch()
            self.journal.append(Op("mkdir", path, node=node))

    def unlink(self, path: str) -> None:
        with self.lock:
            node = self.lookup(path)
            if node.is_dir:
                raise _err(errno.EISDIR, path)
            self._detach(node)
            self.journal.append(Op("unlink", path))

    def rmdir(self, path: str) -> None:
        with self.lock:
            node = self.lookup(path)
            if not node.is_dir:
                raise _err(errno.ENOTDIR, path)
            if node is self.root:
                raise _err(errno.EBUSY, path)
            if node.children:
                raise _err(errno.ENOTEMPTY, path)
            self._detach(node)
            self.journal.append(Op("rmdir", path))

    def rename(self, old: str, new: str) -> None:
        with self.lock:
            src = self.lookup(old)
            parent, name = self._parent_of(new)
            victim = parent.children.get(name)
            if victim is src:
                return
            if src is self.root or (src.is_dir and (new + "/").startswith(old.rstrip("/") + "/")):
                raise _err(errno.EINVAL, new)
            if victim is not None:
                self._check_replace(src, victim, new)
                self._detach(victim)
            self._unlink_name(src)
            src.name, src.parent = name, parent
            parent.children[name] = src
            parent.touch()
            src.ctime = parent.ctime
            self.journal.append(Op("rename", old, dest=new))

    @staticmethod
    def _check_replace(src: Node, victim: Node, path: str) -> None:
        if victim.is_dir and not src.is_dir:
            raise _err(errno.EISDIR, path)
        if src.is_dir and not victim.is_dir:
            raise _err(errno.ENOTDIR, path)
        if victim.is_dir and victim.children:
            raise _err(errno.ENOTEMPTY, path)

    @staticmethod
    def _unlink_name(node: Node) -> None:
        assert node.parent is not None
        node.parent.children.pop(node.name, None)
        node.parent.touch()
        node.parent = None

    def _detach(self, node: Node) -> None:
        """Remove a node's name; its cache lives on only while it is open."""
        self._unlink_name(node)
        if node.open_count == 0:
            self._forget(node)

    def _forget(self, node: Node) -> None:
        """Drop the cache of a file no name and no open handle refers to."""
        self.total_dirty -= node.extents.dirty_bytes
        node.extents.truncate(0)
        self.dirty.discard(node)
        self._close_fd(node)

    def _check_live(self, node: Node) -> None:
        """Nodes from before a power loss are dead: a process still holding one gets EIO.

        Checked under the lock, so a request racing with lose_unsynced cannot
        put a dead node back into the cache."""
        if node.generation != self.generation:
            raise _err(errno.EIO, node.label())

    def readdir(self, node: Node) -> list[str]:
        with self.lock:
            self._check_live(node)
            if not node.is_dir:
                raise _err(errno.ENOTDIR, node.label())
            return list(node.children)

    # ---- file data -----------------------------------------------------

    def opened(self, node: Node) -> None:
        with self.lock:
            self._check_live(node)
            node.open_count += 1

    def released(self, node: Node) -> None:
        with self.lock:
            if node.generation != self.generation:
                return  # opened before a power loss: its state is gone already
            node.open_count -= 1
            if node.open_count > 0:
                return
            if node.parent is None and node is not self.root:
                self._forget(node)
            elif not node.is_dirty:
                self._close_fd(node)

    def read(self, node: Node, offset: int, size: int) -> bytes:
        with self.lock:
            self._check_live(node)
            size = max(0, min(size, node.size - offset))
            if size == 0:
                return b""
            out = bytearray(size)
            limit = min(node.trunc_floor, node.durable_size)
            if offset < limit:
                fd = self._fd(node)
                if fd is not None:
                    data = os.pread(fd, min(size, limit - offset), offset)
                    out[: len(data)] = data
            for start, piece in node.extents.overlapping(offset, size):
                out[start - offset : start - offset + len(piece)] = piece
            return bytes(out)

    def write(self, node: Node, offset: int, data: bytes | memoryview, append: bool = False,
              writeback: bool = False) -> int:
        """`writeback`: the kernel writing back a cached page, which may have been written
        before a power loss and held by the kernel through it (dropped then, not refused)."""
        self.quiet.wait()
        with self.lock:
            if writeback and node.generation != self.generation:
                self._drop_late_page(node, offset, data)
                return len(data)
            self._check_live(node)
            if append:
                offset = node.size
            end = offset + len(data)
            skip = self._unchanged_prefix(node, offset, data)
            self.total_dirty += node.extents.write(offset + skip, memoryview(data)[skip:])
            node.size = max(node.size, end)
            node.touch()
            if node.is_dirty:  # a write of nothing but durable bytes leaves it clean
                self.dirty.add(node)
            if self.dirty_limit and self.total_dirty > self.dirty_limit:
                self.flush_all()
            return len(data)

    def _unchanged_prefix(self, node: Node, offset: int, data: bytes | memoryview) -> int:
        """How many leading bytes of a write already are the durable bytes there, untouched
        since: the kernel's write-back sends whole pages, so an append after an fsync
        rewrites the durable head of its first page, which is not unsynced data."""
        limit = min(node.trunc_floor, node.durable_size, offset + len(data))
        if offset >= limit or node.extents.touches(offset, limit - offset):
            return 0
        fd = self._fd(node)
        assert fd is not None
        return unchanged_prefix(data, os.pread(fd, limit - offset, offset))

    def _drop_late_page(self, node: Node, offset: int, data: bytes | memoryview) -> None:
        """A page written before a power loss and written back after it (the kernel held it):
        dropped and counted as lost, as if the loss had found it here. The kernel is told it
        was written: an error would stay on the file for its next user to trip over."""
        lost = len(data)
        if node.backing is not None and offset < node.durable_size:
            real = self.tree.real(node.backing)
            try:
                with open(real, "rb") as f:  # the durable bytes: what the loss left
                    f.seek(offset)
                    lost -= unchanged_prefix(data, f.read(node.durable_size - offset))
            except OSError:
                pass  # gone since: all of it counts
        self.late_losses[node.label()] = self.late_losses.get(node.label(), 0) + lost

    def take_late_losses(self) -> dict[str, int]:
        """Bytes dropped since the last power loss, per file (see _drop_late_page)."""
        with self.lock:
            taken, self.late_losses = self.late_losses, {}
            return taken

    def truncate(self, node: Node, size: int) -> None:
        with self.lock:
            self._check_live(node)
            if node.is_dir:
                raise _err(errno.EISDIR, node.label())
            if size == node.size:
                return  # POSIX: only a size change updates the times
            if size < node.size:
                self.total_dirty -= node.extents.truncate(size)
                node.trunc_floor = min(node.trunc_floor, size)
            node.size = size
            node.touch()
            if node.is_dirty:
                self.dirty.add(node)
            else:
                self.dirty.discard(node)

    def set_attrs(self, node: Node, **attrs: Any) -> None:
        """chmod/chown/utimens: applied to the backing file at once, not modelled as losable."""
        with self.lock:
            self._check_live(node)
            for key, value in attrs.items():
                setattr(node, key, value)
            node.ctime = max(node.ctime, node.mtime)
            if node.backing is None:
                return  # the journal's create applies mode and owner later
            real = self.tree.real(node.backing)
            if "mode" in attrs:
                os.chmod(real, stat.S_IMODE(node.mode))
            if "uid" in attrs or "gid" in attrs:
                os.chown(real, node.uid, node.gid)
            if "mtime" in attrs or "atime" in attrs:
                os.utime(real, ns=(node.atime, node.mtime))

    def namespace(self) -> tuple[dict[str, int], list[str]]:
        """Every file's path and size, and every directory's path, as processes see them."""
        with self._first():
            nodes = list(self._walk())
            return {path: node.size for path, node in nodes if not node.is_dir}, \
                [path for path, node in nodes if node.is_dir]

    def open_files(self) -> list[str]:
        """Paths of the files some process holds open (or mapped): only theirs can have
        pages the kernel has not written back."""
        with self._first():
            return [path for path, node in self._walk() if not node.is_dir and node.open_count > 0]

    def _walk(self) -> Iterator[tuple[str, Node]]:
        stack = [("/", self.root)]
        while stack:
            path, node = stack.pop()
            yield path, node
            if node.is_dir:
                stack.extend((os.path.join(path, name), child) for name, child in node.children.items())

    # ---- durability ----------------------------------------------------

    def fsync(self, node: Node) -> None:
        """fsync/fdatasync: the file's data; plus the journal if its creation is pending."""
        with self.lock:
            self._check_live(node)
            if node.is_dir:
                self.commit_journal()
                return
            if node.backing is None and node.parent is not None:
                self.commit_journal()
            if node.backing is not None and node.is_dirty:
                self._flush_node(node)

    def commit_journal(self) -> None:
        with self.lock:
            dirs: set[str] = set()
            try:
                while self.journal:
                    dirs |= self.tree.apply(self.journal[0])
                    del self.journal[0]  # only once applied: a failed commit can be retried
            finally:
                self._sync_dirs(dirs)

    def flush_all(self) -> dict[str, Any]:
        """Make everything durable: the journal, then every file's data."""
        with self.lock:
            ops = len(self.journal)
            self.commit_journal()
            flushed = {}
            for node in sorted(self.dirty, key=Node.label):
                if node.backing is not None:
                    flushed[node.label()] = node.extents.dirty_bytes
                    self._flush_node(node)
            return {"metadata_ops": ops, "files": flushed, "bytes": sum(flushed.values())}

    def _flush_node(self, node: Node) -> None:
        fd = self._fd(node)
        assert fd is not None
        self._write_pieces(fd, node, node.extents.pieces(), truncate=True)
        if self.sync_backing:
            os.fsync(fd)
        self.total_dirty -= node.extents.dirty_bytes
        node.extents.truncate(0)
        node.durable_size = node.trunc_floor = node.size
        self.dirty.discard(node)
        if node.open_count == 0:
            self._close_fd(node)

    @staticmethod
    def _write_pieces(fd: int, node: Node, pieces: list[tuple[int, bytes]], truncate: bool) -> int:
        """Write pieces to the backing file; returns its new length."""
        if truncate and node.trunc_floor < node.durable_size:
            os.ftruncate(fd, node.trunc_floor)
        length = node.trunc_floor if truncate else node.durable_size
        for offset, data in pieces:
            view = memoryview(data)
            pos = offset
            while view:
                done = os.pwrite(fd, view, pos)
                view, pos = view[done:], pos + done
            length = max(length, offset + len(data))
        if truncate and length != node.size:
            os.ftruncate(fd, node.size)
            length = node.size
        return length

    def _sync_dirs(self, dirs: set[str]) -> None:
        if not self.sync_backing:
            return
        for path in sorted(dirs):
            try:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:
                continue  # removed by a later operation of the same commit
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def _fd(self, node: Node) -> int | None:
        if node.fd is None and node.backing is not None:
            node.fd = os.open(self.tree.real(node.backing), os.O_RDWR)
            self._with_fd.add(node)
        return node.fd

    def _close_fd(self, node: Node) -> None:
        if node.fd is not None:
            os.close(node.fd)
            node.fd = None
        self._with_fd.discard(node)

    # ---- power loss ----------------------------------------------------

    def report(self) -> dict[str, Any]:
        with self.lock:
            files = {
                n.label(): {
                    "unsynced_bytes": n.extents.dirty_bytes,
                    "size": n.size,
                    "durable_size": n.durable_size if n.backing is not None else 0,
                }
                for n in sorted(self.dirty, key=Node.label)
            }
            return {
                "unsynced_bytes": self.total_dirty,
                "files": files,
                "pending_metadata": [op.describe() for op in self.journal],
            }

    def lose_unsynced(self) -> dict[str, Any]:
        """Power loss: forget every unflushed write and pending namespace operation."""
        with self._first():
            lost = {n.label(): n.extents.dirty_bytes for n in sorted(self.dirty, key=Node.label)}
            dropped = [op.describe() for op in self.journal]
            self._reset()
            return {
                "lost_bytes": sum(lost.values()),
                "files": lost,
                "dropped_metadata": dropped,
                "generation": self.generation,
            }

    def torn(self, seed: int | None = None, mode: str = "prefix") -> dict[str, Any]:
        """Power loss mid-writeback: a random journal prefix and random parts of the data survive."""
        if mode not in MODES:
            raise ValueError(f"unknown torn mode {mode!r}; expected one of {', '.join(MODES)}")
        with self._first():
            if seed is None:
                seed = random.SystemRandom().randrange(2**32)
            rng = random.Random(seed)
            keep_ops = rng.randint(0, len(self.journal))
            kept_ops = [op.describe() for op in self.journal[:keep_ops]]
            dropped_ops = [op.describe() for op in self.journal[keep_ops:]]
            dirs: set[str] = set()
            for op in self.journal[:keep_ops]:
                dirs |= self.tree.apply(op)
            self.journal.clear()
            self._sync_dirs(dirs)
            files = {}
            for node in sorted(self.dirty, key=lambda n: (n.backing is None, n.backing or "", n.label())):
                unsynced, kept = node.extents.dirty_bytes, self._tear(node, rng, mode)
                files[node.label()] = {"unsynced_bytes": unsynced, "kept_bytes": kept, "lost_bytes": unsynced - kept}
            self._reset()
            return {
                "seed": seed,
                "mode": mode,
                "lost_bytes": sum(f["lost_bytes"] for f in files.values()),
                "files": files,
                "kept_metadata": kept_ops,
                "dropped_metadata": dropped_ops,
                "generation": self.generation,
            }

    @contextmanager
    def _first(self) -> Iterator[None]:
        """The lock, ahead of writes waiting for it."""
        self.quiet.clear()
        try:
            with self.lock:
                yield
        finally:
            self.quiet.set()

    def _tear(self, node: Node, rng: random.Random, mode: str) -> int:
        """Write the randomly kept part of a file's unsynced data; returns the bytes kept."""
        if node.backing is None:
            return 0  # its creation never became durable: nothing of it survives
        pieces = kept_pieces(node.extents, rng, mode)
        fd = self._fd(node)
        assert fd is not None
        self._write_pieces(fd, node, pieces, truncate=False)
        if self.sync_backing:
            os.fsync(fd)
        return sum(len(data) for _, data in pieces)

    def _reset(self) -> None:
        """Forget all in-memory state and reload the namespace from the backing directory."""
        for node in list(self._with_fd):
            self._close_fd(node)
        self.journal.clear()
        self.dirty.clear()
        self.total_dirty = 0
        self.late_losses = {}
        self.generation += 1
        self.root = self._load()
