"""Network slots: each live netns cluster owns one slot, held by an flock.

A slot k names everything a cluster creates in the machine's shared namespaces: namespaces
kch-<k>-n<i>, bridge kchbr<k>, root-side veths kch<k>v<i>, subnet 10.213.<k>.0/24 and the
root iptables rule commented kch-slot-<k>. The lock is released by the kernel when the owner
dies, however it dies, so "lock free but resources present" means exactly "left over by a
crashed run" -- and clusters of other live processes are never touched by cleanup.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

STATE_ROOT = Path(os.environ.get("KCH_STATE_DIR", "/run/kch"))
MAX_SLOTS = 256
SUBNET_PREFIX = "10.213"  # private; used only on our bridges, never routed off the machine
FIRST_HOST_OCTET = 11
MAX_HOSTS = 200

NETNS_RE = re.compile(r"^kch-(\d+)-n(\d+)$")
LINK_RE = re.compile(r"^kch(?:br(\d+)|(\d+)v\d+)$")


def netns_name(slot: int, index: int) -> str:
    return f"kch-{slot}-n{index}"


def bridge_name(slot: int) -> str:
    return f"kchbr{slot}"


def veth_name(slot: int, index: int) -> str:
    return f"kch{slot}v{index}"


def bridge_address(slot: int) -> str:
    return f"{SUBNET_PREFIX}.{slot}.1"


def host_address(slot: int, index: int) -> str:
    return f"{SUBNET_PREFIX}.{slot}.{FIRST_HOST_OCTET - 1 + index}"


def subnet(slot: int) -> str:
    return f"{SUBNET_PREFIX}.{slot}.0/24"


def rule_comment(slot: int) -> str:
    return f"kch-slot-{slot}"


def _state_root() -> Path:
    STATE_ROOT.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = STATE_ROOT.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise PermissionError(f"{STATE_ROOT} must be owned by uid {os.getuid()} and not writable by others")
    return STATE_ROOT


@dataclass
class SlotLease:
    """A held slot; release() (or process death) frees it."""

    slot: int
    fd: int | None

    def write_state(self, state: dict) -> None:
        path = _state_root() / f"slot-{self.slot}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(path)

    def release(self) -> None:
        (_state_root() / f"slot-{self.slot}.json").unlink(missing_ok=True)
        if self.fd is not None:
            os.close(self.fd)  # closing the only descriptor drops the flock
            self.fd = None


def try_lock(slot: int) -> SlotLease | None:
    """Lock slot without waiting; None if a live process holds it."""
    fd = os.open(_state_root() / f"slot-{slot}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return SlotLease(slot, fd)


def is_locked(slot: int) -> bool:
    """Whether a live process holds slot (probes without keeping the lock)."""
    fd = os.open(_state_root() / f"slot-{slot}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def read_state(slot: int) -> dict:
    """What the slot's last owner recorded (cluster_dir, n); {} if nothing or unreadable."""
    try:
        return json.loads((_state_root() / f"slot-{slot}.json").read_text())
    except (OSError, ValueError):
        return {}


def recorded_slots() -> set[int]:
    found = set()
    for path in _state_root().glob("slot-*.json"):
        m = re.fullmatch(r"slot-(\d+)\.json", path.name)
        if m:
            found.add(int(m.group(1)))
    return found
