"""Starting, finding and unmounting lossy-filesystem daemons (no libfuse needed here).

A daemon is a `python -m nemesis.lazyfs mount ... --foreground` child in its own
session. It writes SOCK.pid next to its control socket and a registry entry
keyed by the mountpoint, so `umount MOUNTPOINT` can find and wait for it.

The registry is a private directory (0700, owned by us, checked with lstat before every use:
see registry_dir); entries of daemons that died without removing theirs are pruned whenever a
daemon is started or a mount is taken down.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from control.files import private_dir, write_text_atomic
from nemesis.lazyfs.control import LazyFSClient, LazyFSError

READY_TIMEOUT_S = 20.0
EXIT_TIMEOUT_S = 20.0
LAZY_EXIT_TIMEOUT_S = 2.0
STALE_TMP_S = 60.0  # a temporary registry file older than this was left by a killed writer
ROOT_REGISTRY = "/run/lazyfs-mounts"  # root's: /run is root's own, unlike the shared /tmp


@dataclass
class MountOptions:
    backing: str
    mountpoint: str
    control: str
    flush_interval_ms: int = 0
    dirty_limit_bytes: int = 0
    sync_backing: bool = True
    # Name endings of files served through the kernel's page cache instead of direct I/O, so
    # programs can map them shared and writable (FUSE refuses that on a direct-I/O file)
    page_cached: tuple[str, ...] = ()
    # The kernel caches writes and hands the daemon whole pages (FUSE write-back caching);
    # off, every read and write reaches the daemon as the process made it (direct I/O)
    writeback_cache: bool = True


def registry_dir() -> str:
    """$LAZYFS_RUN_DIR, else /run/lazyfs-mounts for root and <tmp>/lazyfs-mounts-<uid> for
    others; created 0700 if missing, and refused (UnsafePathError) unless it is a real
    directory owned by us that nobody else can use: an entry planted there would make us
    signal its pid or talk to its socket."""
    path = os.environ.get("LAZYFS_RUN_DIR")
    if not path:
        uid = os.geteuid()
        path = ROOT_REGISTRY if uid == 0 else os.path.join(tempfile.gettempdir(),
                                                          f"lazyfs-mounts-{uid}")
    private_dir(Path(path))
    return path


def registry_file(mountpoint: str) -> str:
    key = hashlib.sha1(os.path.realpath(mountpoint).encode()).hexdigest()[:16]
    return os.path.join(registry_dir(), key + ".json")


def pidfile_for(control: str) -> str:
    return control + ".pid"


def is_mounted(mountpoint: str) -> bool:
    """True if mountpoint is in the mount table (also when its daemon is dead)."""
    target = os.path.realpath(mountpoint)
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            point = fields[1].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
            if point == target:
                return True
    return False


def write_json(path: str, data: dict[str, Any]) -> None:
    """Atomically, through a fresh temporary file: never writes through a planted symlink."""
    write_text_atomic(Path(path), json.dumps(data), mode=0o600)


def remove_file(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def prune_registry() -> list[str]:
    """Remove the registry entries of daemons that are gone (a SIGKILLed daemon never removes
    its own) and temporary files killed writers left; the paths removed."""
    directory = registry_dir()
    removed = []
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if name.endswith(".tmp"):
            try:
                stale = time.time() - os.lstat(path).st_mtime > STALE_TMP_S
            except FileNotFoundError:
                continue
        elif name.endswith(".json"):
            entry = _read_entry(path)
            pid = entry.get("pid") if entry else None
            stale = not (isinstance(pid, int) and not isinstance(pid, bool)
                         and _is_our_daemon(pid) and not _is_zombie(pid))
        else:
            continue
        if stale:
            remove_file(path)
            removed.append(path)
    return removed


def _prune_quietly() -> None:
    try:
        prune_registry()
    except OSError:
        pass  # housekeeping must never fail a mount or an unmount


def spawn_daemon(opts: MountOptions) -> int:
    """Start a daemon for opts and return its pid once the mount serves requests."""
    registry_dir()  # an unsafe registry is refused here, before anything is started
    _prune_quietly()
    log_path = opts.control + ".log"
    argv = [sys.executable, "-m", "nemesis.lazyfs", "mount", opts.backing, opts.mountpoint,
            "--control", opts.control, "--foreground",
            "--flush-interval-ms", str(opts.flush_interval_ms),
            "--dirty-limit-bytes", str(opts.dirty_limit_bytes)]
    if not opts.sync_backing:
        argv.append("--no-sync-backing")
    for suffix in opts.page_cached:
        argv += ["--page-cached", suffix]
    if not opts.writeback_cache:
        argv.append("--no-writeback-cache")
    with open(log_path, "ab") as log_file:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file,
                                start_new_session=True, close_fds=True)
    deadline = time.monotonic() + READY_TIMEOUT_S
    client = LazyFSClient(opts.control, timeout=2.0)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"lazyfs daemon exited with {proc.returncode}:\n{_tail(log_path)}")
        try:
            if client.ping()["pid"] == proc.pid and is_mounted(opts.mountpoint):
                return proc.pid
        except (OSError, LazyFSError, ValueError):
            pass
        time.sleep(0.02)
    proc.kill()
    raise TimeoutError(f"lazyfs daemon not ready after {READY_TIMEOUT_S}s:\n{_tail(log_path)}")


def _tail(path: str, lines: int = 20) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"


def unmount(mountpoint: str, timeout: float = EXIT_TIMEOUT_S) -> dict[str, Any]:
    """Unmount cleanly, lazily if the daemon is dead or the mount busy; wait for the daemon."""
    entry = _read_registry(mountpoint)
    result: dict[str, Any] = {"mountpoint": os.path.realpath(mountpoint), "unmounted": False, "lazy": False}
    if is_mounted(mountpoint):
        done = subprocess.run(["fusermount3", "-u", mountpoint], capture_output=True, text=True)
        if done.returncode != 0:
            # busy, or the daemon is dead: still a clean shutdown if the daemon can flush
            result["flushed"] = _try_flush(entry)
            lazy = subprocess.run(["fusermount3", "-uz", mountpoint], capture_output=True, text=True)
            if lazy.returncode != 0:
                raise RuntimeError(f"cannot unmount {mountpoint}: {done.stderr.strip()}; {lazy.stderr.strip()}")
            result["lazy"] = True
            timeout = min(timeout, LAZY_EXIT_TIMEOUT_S)  # users of a detached mount keep it alive
        result["unmounted"] = True
    pid = entry.get("pid") if entry else None
    if isinstance(pid, int):
        result["daemon"] = _await_exit(pid, timeout)
    remove_file(registry_file(mountpoint))
    _prune_quietly()
    return result


def _try_flush(entry: dict[str, Any] | None) -> bool:
    control = entry.get("control") if entry else None
    if not isinstance(control, str):
        return False
    try:
        LazyFSClient(control, timeout=10.0).flush_all()
    except (OSError, LazyFSError, ValueError):
        return False
    return True


def _read_registry(mountpoint: str) -> dict[str, Any] | None:
    return _read_entry(registry_file(mountpoint))


def _read_entry(path: str) -> dict[str, Any] | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd) as f:
            entry = json.load(f)
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) else None


def _is_our_daemon(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return b"nemesis.lazyfs" in argv and b"mount" in argv


def _await_exit(pid: int, timeout: float) -> str:
    """Wait for a daemon to finish its final flush; kill it if it hangs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _is_our_daemon(pid) or _is_zombie(pid):
            return "exited"
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    return "killed"


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
