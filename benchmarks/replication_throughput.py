"""Acknowledged records/s and ack latency of the embedded system: 3 brokers + controller on
loopback, RF 3, MinISR 2, acks=all and acks=1, the client batching and pipelining.

    .venv/bin/python benchmarks/replication_throughput.py [--records 100000] [--concurrency 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from replication.client import Client

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # tests/support: scaffolding
from support.local_cluster import LocalCluster  # noqa: E402


async def _bench(cluster: LocalCluster, acks: str, records: int, concurrency: int) -> dict:
    client = Client(cluster.address(1), request_timeout_s=30, linger_ms=2, max_batch=1000)
    latencies: list[float] = []
    next_value = iter(range(records))
    topic = f"bench-{acks}"
    await client.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    await asyncio.sleep(1.0)

    async def worker() -> None:
        for v in next_value:
            t0 = time.perf_counter()
            await client.produce(topic, 0, str(v), acks)
            latencies.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - t0
    await client.close()
    latencies.sort()
    return {"acks": acks, "records": records, "seconds": elapsed, "rate": records / elapsed,
            "p50_ms": 1000 * statistics.median(latencies),
            "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--concurrency", type=int, default=2000, help="sends in flight at once")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(Path(tmp), brokers=3) as cluster:
        print(f"{'acks':>5} {'records':>8} {'seconds':>8} {'records/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
        for acks in ("all", "1"):
            r = asyncio.run(_bench(cluster, acks, args.records, args.concurrency))
            print(f"{r['acks']:>5} {r['records']:>8} {r['seconds']:>8.2f} {r['rate']:>10.0f} "
                  f"{r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f}")


if __name__ == "__main__":
    main()
