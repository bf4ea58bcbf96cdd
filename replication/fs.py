"""The filesystem port of the storage code (segment_log.py, segment_format.py, broker_store.py).

Every file and directory operation of a partition log and a broker's data directory goes
through an `Fs`. On real hosts it is `OS_FS`, whose methods are the `os` calls themselves (no
wrapper on the append path); the simulator passes an in-memory filesystem with the lossy
filesystem's durability model (simulation/simfs.py), so that the same storage code, its disk
format and its recovery run there too. Descriptors are ints, as `os` gives them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol


class Fs(Protocol):
    """The operations the storage code uses, with the signatures and errors of `os`."""

    def open(self, path: Path, flags: int, mode: int = 0o777) -> int: ...
    def close(self, fd: int) -> None: ...
    def dup(self, fd: int) -> int: ...
    def pread(self, fd: int, n: int, offset: int) -> bytes: ...
    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int: ...
    def ftruncate(self, fd: int, length: int) -> None: ...
    def fsync(self, fd: int) -> None: ...
    def truncate(self, path: Path, length: int) -> None: ...
    def replace(self, src: Path, dst: Path) -> None: ...
    def unlink(self, path: Path, missing_ok: bool = False) -> None: ...
    def makedirs(self, path: Path) -> None: ...
    def listdir(self, path: Path) -> list[str]: ...
    def size(self, path: Path) -> int: ...
    def read_bytes(self, path: Path) -> bytes: ...


class OsFs:
    """The real filesystem."""

    open = staticmethod(os.open)
    close = staticmethod(os.close)
    dup = staticmethod(os.dup)
    pread = staticmethod(os.pread)
    pwrite = staticmethod(os.pwrite)
    ftruncate = staticmethod(os.ftruncate)
    fsync = staticmethod(os.fsync)
    truncate = staticmethod(os.truncate)
    replace = staticmethod(os.replace)
    listdir = staticmethod(os.listdir)

    @staticmethod
    def unlink(path: Path, missing_ok: bool = False) -> None:
        Path(path).unlink(missing_ok=missing_ok)

    @staticmethod
    def makedirs(path: Path) -> None:
        """mkdir -p: the directory and any missing parent; an existing one is fine."""
        Path(path).mkdir(parents=True, exist_ok=True)

    @staticmethod
    def size(path: Path) -> int:
        return os.stat(path).st_size

    @staticmethod
    def read_bytes(path: Path) -> bytes:
        return Path(path).read_bytes()


OS_FS: Fs = OsFs()
