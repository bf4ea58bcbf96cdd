"""I/O fault switches of a mount, flipped through the control socket."""

from dataclasses import dataclass


@dataclass
class Faults:
    slow_fsync_ms: int = 0
    eio_write: bool = False
    eio_fsync: bool = False
