"""Removal of netns clusters: one slot on demand, or everything crashed runs left behind."""

from __future__ import annotations

import subprocess

from control import netns, slots
from control.files import remove_private_dir

CLUSTER_MARKER = ".kch-cluster"  # netns_provider.MARKER: only such directories are removed


def _fuse_mounts_under(directory: str) -> list[str]:
    prefix = directory.rstrip("/") + "/"
    found = []
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) < 3:
                continue
            # /proc/mounts escapes blanks as octal (\040); undo it for the path we pass on.
            point = fields[1].encode().decode("unicode_escape")
            if fields[2].startswith("fuse") and (point + "/").startswith(prefix):
                found.append(point)
    # Deepest first, so nested mounts come off before their parents.
    return sorted(found, key=len, reverse=True)


def clean_slot(slot: int, cluster_dir: str | None, remove_dir: bool = False) -> None:
    """Kill the slot's processes, unmount FUSE under its cluster dir, remove its network, and
    with `remove_dir` the cluster dir itself (a temporary one the provider made: only if it is
    still a real directory of ours carrying the cluster marker).

    The caller must hold the slot's lock. Safe when nothing exists.
    """
    netns.kill_slot_processes(slot, cluster_dir)
    if cluster_dir:
        for point in _fuse_mounts_under(cluster_dir):
            subprocess.run(["fusermount3", "-uz", point], capture_output=True)
    netns.destroy_network(slot)
    if cluster_dir and remove_dir:
        remove_private_dir(cluster_dir, CLUSTER_MARKER)


def cleanup_stale() -> list[int]:
    """Remove the leftovers of crashed or interrupted netns runs; the slots cleaned.

    Clusters of live processes hold their slot's lock and are left alone, so this is safe to
    call at any time, also while other runs are going on.
    """
    cleaned = []
    candidates = netns.slots_present() | slots.recorded_slots() | netns.slots_with_rules()
    for slot in sorted(candidates):
        lease = slots.try_lock(slot)
        if lease is None:
            continue
        try:
            state = slots.read_state(slot)
            clean_slot(slot, state.get("cluster_dir"), remove_dir=state.get("remove_dir") is True)
            cleaned.append(slot)
        finally:
            lease.release()
    return cleaned
