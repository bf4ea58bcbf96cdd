"""Overhead of the lossy FUSE filesystem versus its backing directory, and power-loss latency.

    .venv/bin/python benchmarks/lazyfs_overhead.py [--size-mb 64] [--fsyncs 300] [--power-losses 10]
        [--rounds 3] [--modes writeback,direct-io] [--no-sync-backing]

Prints, side by side for the backing directory and one mount over it per mode (`writeback`:
the kernel caches writes, the default; `direct-io`: `--no-writeback-cache`, every write
reaches the daemon as made): sequential append throughput with 4 KiB and 64 KiB writes (no
fsync inside the timed loop; the median of --rounds interleaved rounds), fsync latency
(4 KiB append + fsync, p50/p99), and the time from issuing a power loss (SIGKILL of a
process appending into the mount + lose-unsynced over the control socket) until the writer
is reaped and the cache dropped. Needs root and /dev/fuse.
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # tests/support: scaffolding
from support.machine import what_ran  # noqa: E402

MODES = {"writeback": True, "direct-io": False}  # mode name -> MountOptions.writeback_cache

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


def row(label: str, backing: float, mounts: list[float], fmt: str) -> str:
    cells = "".join(f"{v:>12{fmt}}{v / backing:>9.2f}x" for v in mounts)
    return f"{label:<28}{backing:>12{fmt}}{cells}"


def measure(dirs: dict[str, Path], clients: dict[str, LazyFSClient], args: argparse.Namespace) -> None:
    """dirs: 'backing' and one directory per mode, all measured the same way, interleaved."""
    names = [n for n in dirs if n != "backing"]
    print(f"{'measure':<28}{'backing':>12}" + "".join(f"{n:>12}{'/backing':>10}" for n in names))
    total = args.size_mb << 20
    for block in (4096, 65536):
        runs: dict[str, list[float]] = {n: [] for n in dirs}
        for _ in range(args.rounds):
            for name, d in dirs.items():
                runs[name].append(append_throughput(d / "t", total, block))
        med = {n: statistics.median(v) for n, v in runs.items()}
        print(row(f"append {block // 1024} KiB writes MB/s", med["backing"], [med[n] for n in names], ".1f"))
    lat = {name: fsync_latencies(d / "f", args.fsyncs) for name, d in dirs.items()}
    for pct in (50, 99):
        p = {n: percentile(v, pct) * 1e3 for n, v in lat.items()}
        print(row(f"fsync p{pct} ms", p["backing"], [p[n] for n in names], ".3f"))
    for name in names:
        times, lost = power_loss_latency(dirs[name], clients[name], args.power_losses)
        ms = [t * 1e3 for t in times]
        print(f"power loss, {name} (SIGKILL writer + lose-unsynced): median {statistics.median(ms):.1f} ms, "
              f"max {max(ms):.1f} ms over {len(ms)} rounds; unsynced bytes dropped per round: "
              f"median {statistics.median(lost) / 1e6:.1f} MB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=64, help="bytes appended per throughput run")
    parser.add_argument("--fsyncs", type=int, default=300, help="fsyncs per latency run")
    parser.add_argument("--power-losses", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3, help="throughput runs per target (median)")
    parser.add_argument("--modes", default="writeback,direct-io",
                        help=f"comma-separated mount modes to compare: {', '.join(MODES)}")
    parser.add_argument("--dir", default=None, help="where to create the backing dirs and mountpoints")
    parser.add_argument("--no-sync-backing", action="store_true",
                        help="mount with --no-sync-backing (fsync through the mount skips the backing fsync)")
    args = parser.parse_args()
    print(what_ran(), flush=True)
    modes = args.modes.split(",")
    if any(m not in MODES for m in modes) or args.rounds < 1:
        parser.error(f"--modes takes {', '.join(MODES)}; --rounds must be >= 1")

    with tempfile.TemporaryDirectory(dir=args.dir, prefix="lazyfs-bench-") as tmp:
        dirs = {"backing": Path(tmp, "direct")}
        dirs["backing"].mkdir()
        clients, mounts = {}, []
        try:
            for mode in modes:
                backing, mnt, sock = Path(tmp, f"backing-{mode}"), Path(tmp, f"mnt-{mode}"), os.path.join(tmp, f"{mode}.sock")
                backing.mkdir()
                mnt.mkdir()
                spawn_daemon(MountOptions(str(backing), str(mnt), sock, sync_backing=not args.no_sync_backing,
                                          writeback_cache=MODES[mode]))
                mounts.append(mnt)
                clients[mode] = LazyFSClient(sock)
                dirs[mode] = mnt / "via"
                dirs[mode].mkdir()
            print(f"lazyfs overhead: {args.size_mb} MiB appends x {args.rounds} rounds, {args.fsyncs} fsyncs, "
                  f"{args.power_losses} power losses; backing fs under {tmp}; "
                  f"backing fsync on flush: {not args.no_sync_backing}; load average {os.getloadavg()[0]:.1f}")
            measure(dirs, clients, args)
        finally:
            for mnt in mounts:
                unmount(str(mnt))
    return 0


if __name__ == "__main__":
    sys.exit(main())
