"""Overhead of the lossy FUSE filesystem versus its backing directory, and power-loss latency.

    .venv/bin/python benchmarks/lazyfs_overhead.py [--size-mb 64] [--fsyncs 300] [--power-losses 10]
        [--no-sync-backing]

Prints, side by side for the backing directory and the mount over it: sequential
append throughput with 4 KiB and 64 KiB writes (no fsync inside the timed loop),
fsync latency (4 KiB append + fsync, p50/p99), and the time from issuing a power
loss (SIGKILL of a process appending into the mount + lose-unsynced over the
control socket) until the writer is reaped and the cache dropped. Needs root and
/dev/fuse.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nemesis.lazyfs import LazyFSClient, MountOptions, spawn_daemon, unmount

WRITER = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
chunk = b"r" * 65536
print("ready", flush=True)
while True:
    os.write(fd, chunk)
"""


def append_throughput(path: Path, total: int, block: int) -> float:
    """MB/s of appending `total` bytes in `block`-sized writes."""
    chunk = os.urandom(block)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(total // block):
            os.write(fd, chunk)
        elapsed = time.perf_counter() - start
        os.fsync(fd)  # not timed: leaves nothing dirty for the next measurement
    finally:
        os.close(fd)
    os.unlink(path)
    return total / elapsed / 1e6


def fsync_latencies(path: Path, count: int) -> list[float]:
    """Seconds per fsync after each 4 KiB append."""
    chunk = os.urandom(4096)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
    out = []
    try:
        for _ in range(count):
            os.write(fd, chunk)
            start = time.perf_counter()
            os.fsync(fd)
            out.append(time.perf_counter() - start)
    finally:
        os.close(fd)
    os.unlink(path)
    return out


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(pct / 100 * (len(ordered) - 1))))]


def power_loss_latency(mnt: Path, client: LazyFSClient, rounds: int) -> tuple[list[float], list[int]]:
    """Seconds from SIGKILL of an appending writer to writer reaped + cache dropped."""
    times, lost = [], []
    for i in range(rounds):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(mnt / f"pl{i}")],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(0.3)  # let it build up an unsynced tail
        start = time.perf_counter()
        os.kill(proc.pid, signal.SIGKILL)
        result = client.lose_unsynced()
        proc.wait()
        times.append(time.perf_counter() - start)
        lost.append(result["lost_bytes"])
    return times, lost


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=64, help="bytes appended per throughput run")
    parser.add_argument("--fsyncs", type=int, default=300, help="fsyncs per latency run")
    parser.add_argument("--power-losses", type=int, default=10)
    parser.add_argument("--dir", default=None, help="where to create the backing dir and mountpoint")
    parser.add_argument("--no-sync-backing", action="store_true",
                        help="mount with --no-sync-backing (fsync through the mount skips the backing fsync)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(dir=args.dir, prefix="lazyfs-bench-") as tmp:
        backing, mnt, sock = Path(tmp, "backing"), Path(tmp, "mnt"), os.path.join(tmp, "ctl.sock")
        backing.mkdir()
        mnt.mkdir()
        (backing / "direct").mkdir()
        spawn_daemon(MountOptions(str(backing), str(mnt), sock, sync_backing=not args.no_sync_backing))
        client = LazyFSClient(sock)
        try:
            (mnt / "via").mkdir()
            total = args.size_mb << 20
            print(f"lazyfs overhead: {args.size_mb} MiB appends, {args.fsyncs} fsyncs, "
                  f"{args.power_losses} power losses; backing fs under {tmp}; "
                  f"backing fsync on flush: {not args.no_sync_backing}; load average {os.getloadavg()[0]:.1f}")
            print(f"{'measure':<28}{'backing':>12}{'mount':>12}{'mount/backing':>15}")
            for block in (4096, 65536):
                direct = append_throughput(backing / "direct" / "t", total, block)
                via = append_throughput(mnt / "via" / "t", total, block)
                print(f"{f'append {block // 1024} KiB writes MB/s':<28}{direct:>12.1f}{via:>12.1f}{via / direct:>15.2f}")
            direct_l = fsync_latencies(backing / "direct" / "f", args.fsyncs)
            via_l = fsync_latencies(mnt / "via" / "f", args.fsyncs)
            for pct in (50, 99):
                d, v = percentile(direct_l, pct) * 1e3, percentile(via_l, pct) * 1e3
                print(f"{f'fsync p{pct} ms':<28}{d:>12.3f}{v:>12.3f}{v / d:>15.2f}")
            times, lost = power_loss_latency(mnt / "via", client, args.power_losses)
            ms = [t * 1e3 for t in times]
            print(f"power loss (SIGKILL writer + lose-unsynced): median {statistics.median(ms):.1f} ms, "
                  f"max {max(ms):.1f} ms over {len(ms)} rounds; unsynced bytes dropped per round: "
                  f"median {statistics.median(lost) / 1e6:.1f} MB")
        finally:
            unmount(str(mnt))
    return 0


if __name__ == "__main__":
    sys.exit(main())
