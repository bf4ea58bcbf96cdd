"""Broker heartbeat intervals under slow fsyncs: does a slow disk stall a broker's event loop?

A controller and 3 brokers run as processes on 127.0.0.x (tests/support/local_cluster.py), each
broker's data directory on its own lossy FUSE mount (nemesis/lazyfs) with `slow-fsync MS`
(every fsync and directory fsync sleeps MS first, as a slow disk would). The brokers run with
`flush.messages=1` (every append is fsynced before anything depends on it); one topic, RF 3,
MinISR 2, takes acks=all produces from --concurrency pipelined senders for --seconds.

The brokers reach the controller through a small TCP relay in its own process, which notes the
time each heartbeat request passes. Printed, per broker and over all three:

- heartbeat interval: the time between two consecutive heartbeats *arriving at the controller*
  (what the controller's session timeout measures). The brokers send one every
  broker.heartbeat.interval.ms (200 ms here, LocalCluster's setting) plus up to one 20 ms tick
  when their event loop is free, so ~200-220 ms is the healthy figure; a broker whose loop is
  blocked by fsyncs sends late;
- produce throughput (acknowledged records/s), ack latency p50/p99, failed produces;
- what the controller did meanwhile: brokers fenced by session timeout, ISR changes.

Needs root, /dev/fuse and fusermount3 (like benchmarks/lazyfs_overhead.py).

    .venv/bin/python benchmarks/heartbeat_latency.py [--seconds 30] [--fsync-ms 200]
        [--concurrency 200] [--flush-messages 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from replication.client import Client, ProduceError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # tests/support: scaffolding
from support.local_cluster import LocalCluster  # noqa: E402

_HEADER = struct.Struct(">I")
HEARTBEAT_INTERVAL_MS = 200


# ---- the relay between brokers and controller (its own process) ------------------------------


async def _relay(listen: str, upstream: str, out_path: str) -> None:
    """Forward every byte both ways; note (monotonic time, broker) of each heartbeat request."""
    out = open(out_path, "a", buffering=1)
    up_host, up_port = upstream.rsplit(":", 1)

    async def pump_requests(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            header = await reader.readexactly(_HEADER.size)
            (length,) = _HEADER.unpack(header)
            body = await reader.readexactly(length)
            try:
                msg = json.loads(body)
            except ValueError:
                msg = {}
            if isinstance(msg, dict) and msg.get("type") == "heartbeat":
                out.write(f"{time.monotonic():.6f} {msg.get('broker')}\n")
            writer.write(header + body)

    async def pump_bytes(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(up_host, int(up_port))
        except OSError:
            writer.close()
            return
        tasks = [asyncio.ensure_future(pump_requests(reader, up_writer)),
                 asyncio.ensure_future(pump_bytes(up_reader, writer))]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            writer.close()
            up_writer.close()

    host, port = listen.rsplit(":", 1)
    server = await asyncio.start_server(client, host, int(port), reuse_address=True)
    async with server:
        await server.serve_forever()


# ---- the cluster -------------------------------------------------------------------------------


class RelayedCluster(LocalCluster):
    """LocalCluster whose brokers reach the controller through the relay."""

    relay_address = ""

    def start_broker(self, b: int) -> None:
        self._spawn(b, ["broker", "--id", str(b), "--listen", self.address(b), "--controller",
                        self.relay_address, "--data", str(self.root / str(b) / "data"),
                        *self._config_args()])


def _percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(pct / 100 * (len(ordered) - 1))))]


async def _load(cluster: LocalCluster, seconds: float, concurrency: int) -> dict:
    client = Client(cluster.address(1), request_timeout_s=10, linger_ms=2, max_batch=500)
    latencies: list[float] = []
    errors: dict[str, int] = {}
    counter = iter(range(10**9))
    loop = asyncio.get_running_loop()
    stop_at = loop.time() + seconds

    async def worker() -> None:
        while loop.time() < stop_at:
            v = next(counter)
            t0 = time.perf_counter()
            try:
                await client.produce("hb", 0, str(v), "all")
            except ProduceError as e:
                errors[e.error] = errors.get(e.error, 0) + 1
                await asyncio.sleep(0.05)
                continue
            latencies.append(time.perf_counter() - t0)

    t0 = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    t1 = time.monotonic()
    await client.close()
    return {"start": t0, "end": t1, "latencies": latencies, "errors": errors}


async def _create_topic(cluster: LocalCluster) -> None:
    client = Client(cluster.controller_address, request_timeout_s=10)
    try:
        for _ in range(200):  # until the three brokers have registered and are unfenced
            brokers = (await client.metadata(refresh=True)).brokers
            if len(brokers) == 3 and not any(b.fenced for b in brokers.values()):
                break
            await asyncio.sleep(0.1)
        await client.create_topic("hb", 1, 3, {"min.insync.replicas": "2"})
        for _ in range(100):  # until every replica is in the ISR with a leader
            state = await client.partition_state("hb", 0, refresh=True)
            if state.leader is not None and len(state.isr) == 3:
                return
            await asyncio.sleep(0.1)
    finally:
        await client.close()


def _intervals(path: Path, start: float, end: float) -> dict[int, list[float]]:
    """Per broker, ms between consecutive heartbeats that arrived within [start, end]."""
    seen: dict[int, list[float]] = {}
    for line in path.read_text().splitlines():
        t, b = line.split()
        if start <= float(t) <= end and b != "None":
            seen.setdefault(int(b), []).append(float(t))
    return {b: [1000 * (y - x) for x, y in zip(ts, ts[1:], strict=False)] for b, ts in sorted(seen.items())}


def _controller_events(cluster: LocalCluster, start_wall: float, end_wall: float) -> tuple[int, int]:
    fenced = isr_changes = 0
    path = cluster.root / "controller" / "events.jsonl"
    for line in path.read_text().splitlines():
        e = json.loads(line)
        if not start_wall <= e["ts"] <= end_wall:
            continue
        if e["kind"] == "broker-fenced" and e.get("reason") == "session-timeout":
            fenced += 1
        if e["kind"] == "partition-change" and e.get("reason") == "alter-partition":
            isr_changes += 1
    return fenced, isr_changes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30.0, help="length of the produce load")
    ap.add_argument("--fsync-ms", type=int, default=200, help="lazyfs slow-fsync on every broker")
    ap.add_argument("--concurrency", type=int, default=200, help="acks=all sends in flight")
    ap.add_argument("--flush-messages", default="1", help="the brokers' flush.messages")
    ap.add_argument("--relay", nargs=3, metavar=("LISTEN", "UPSTREAM", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.relay:
        asyncio.run(_relay(*args.relay))
        return 0

    from nemesis.lazyfs import LazyFSClient, MountOptions, spawn_daemon, unmount

    with tempfile.TemporaryDirectory(prefix="hb-bench-") as tmp:
        root = Path(tmp)
        cluster = RelayedCluster(root, brokers=3, config={"flush.messages": args.flush_messages})
        cluster.relay_address = f"127.0.0.50:{cluster.port}"
        heartbeats = root / "heartbeats.txt"
        heartbeats.touch()
        relay = subprocess.Popen([sys.executable, __file__, "--relay", cluster.relay_address,
                                  cluster.controller_address, str(heartbeats)])
        mounts, clients = [], []
        try:
            for b in cluster.broker_ids:
                backing, mnt = root / str(b) / "backing", root / str(b) / "data"
                backing.mkdir(parents=True)
                mnt.mkdir()
                sock = str(root / str(b) / "lazyfs.sock")
                spawn_daemon(MountOptions(str(backing), str(mnt), sock, sync_backing=False))
                mounts.append(str(mnt))
                clients.append(LazyFSClient(sock))
            cluster.start()
            asyncio.run(_create_topic(cluster))
            for c in clients:
                c.slow_fsync(args.fsync_ms)
            time.sleep(1.0)
            wall0 = time.time()
            result = asyncio.run(_load(cluster, args.seconds, args.concurrency))
            wall1 = time.time()
            time.sleep(0.5)
            for c in clients:
                c.slow_fsync(0)
        finally:
            cluster.stop()
            relay.terminate()
            relay.wait()
            for m in mounts:
                unmount(m)
        per_broker = _intervals(heartbeats, result["start"], result["end"])
        fenced, isr_changes = _controller_events(cluster, wall0, wall1)

    elapsed = result["end"] - result["start"]
    lat = result["latencies"]
    print(f"heartbeat_latency: {args.seconds:.0f} s of acks=all produces, {args.concurrency} in flight, "
          f"RF 3, MinISR 2, flush.messages={args.flush_messages}, lazyfs slow-fsync {args.fsync_ms} ms "
          f"on every broker; heartbeat interval {HEARTBEAT_INTERVAL_MS} ms; "
          f"load average {os.getloadavg()[0]:.1f}")
    print("heartbeat interval = time between consecutive heartbeats arriving at the controller (ms)")
    print(f"{'broker':>8} {'count':>6} {'p50':>8} {'p99':>8} {'max':>8}")
    everything: list[float] = []
    for b, iv in per_broker.items():
        everything += iv
        if iv:
            print(f"{b:>8} {len(iv):>6} {statistics.median(iv):>8.0f} {_percentile(iv, 99):>8.0f} {max(iv):>8.0f}")
    if everything:
        print(f"{'all':>8} {len(everything):>6} {statistics.median(everything):>8.0f} "
              f"{_percentile(everything, 99):>8.0f} {max(everything):>8.0f}")
    rate = len(lat) / elapsed
    p50 = 1000 * statistics.median(lat) if lat else float("nan")
    p99 = 1000 * _percentile(lat, 99) if lat else float("nan")
    print(f"produce: {len(lat)} acknowledged in {elapsed:.1f} s = {rate:.0f} records/s; "
          f"ack latency p50 {p50:.0f} ms, p99 {p99:.0f} ms; failed: {result['errors'] or 0}")
    print(f"controller during the load: {fenced} session-timeout fences, {isr_changes} ISR changes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
