"""A host as the runner and the nemeses see it, whichever provider made it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from control.remote import Remote


@dataclass(frozen=True)
class Host:
    """Paths are paths on the host (for netns hosts they are also local paths)."""

    name: str  # "n1", "n2", ...
    address: str  # where nodes listen and peers connect
    data_dir: PurePosixPath  # the node's --data directory; events.jsonl goes in its parent
    run_dir: PurePosixPath  # pidfiles of daemons started through `remote`
    log_dir: PurePosixPath  # node logs, collected into results/.../nodes/<host>/
    remote: Remote
    vm: str = ""  # the libvirt domain when the host is a VM (vm-power-off), else ""

    @property
    def work_dir(self) -> PurePosixPath:
        """The host's own directory: parent of data_dir (holds events.jsonl)."""
        return self.data_dir.parent
