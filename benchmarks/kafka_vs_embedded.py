"""Apache Kafka beside the embedded system, in one run, on the same netns hosts (docs/kafka.md):
cluster start, restart after kill -9, acknowledged sends/s and send latency at the campaign
rate and at the highest rate the workload reaches, and a whole run's wall time over its
workload time.

    .venv/bin/python benchmarks/kafka_vs_embedded.py [--systems embedded,kafka:4.2.1,kafka:3.9.1]
        [--rates 300,100000] [--seconds 15]

Each system gets 4 hosts (n1 its controller, 3 brokers, RF 3, 3 partitions, acks=all), and
the workload 16 closed-loop producers at the campaign rate, 64 at the high one. Every
figure is measured here, by this script, on this machine; nothing is assumed."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from harness.config import load_config
from harness.runner import cluster_phase, hosts_phase, run_test
from harness.system import System, system_of
from harness.test import RunClock, Test
from workloads.history import HistoryWriter
from workloads.kafka import WorkloadParams


def _config(system: str, extra: list[str]) -> dict:
    kind, _, version = system.partition(":")
    sets = [f"system.kind={kind}", "nodes=4", "nemesis.faults=[]", *extra]
    if version:
        sets.append(f"kafka.version={version}")
    return load_config("fast", sets)


def _latencies(history: Path) -> tuple[int, list[float]]:
    invoked: dict[tuple, int] = {}
    lat: list[float] = []
    for line in history.read_text().splitlines():
        op = json.loads(line)
        if op["f"] != "send":
            continue
        key = (op["process"], op["value"])
        if op["type"] == "invoke":
            invoked[key] = op["time"]
        elif op["type"] == "ok":
            lat.append((op["time"] - invoked[key]) / 1e6)
    return len(lat), sorted(lat)


async def _bench(test: Test, system: System, cluster, rates: list[int], seconds: float,
                 scratch: Path) -> dict:
    s = test.config
    out: dict = {}
    started = time.monotonic()
    await system.create_topic(cluster.bootstrap(), 3, s.topic.name, 3, 3)
    await system.wait_healthy(cluster.bootstrap(), s.topic.name, 3, 120)
    out["healthy_after_nodes_s"] = time.monotonic() - started
    victim = cluster.broker_hosts[2]
    await asyncio.to_thread(cluster.kill, victim)
    # until the controller has taken the killed broker out of some ISR, so that the restart
    # is timed to the ISR being whole again, not to a broker that was never missed
    deadline = time.monotonic() + 60
    while await system.wait_healthy(cluster.bootstrap(), s.topic.name, 3, 0.3):
        if time.monotonic() > deadline:
            raise RuntimeError("the killed broker never left an ISR")
        await asyncio.sleep(0.2)
    restarted = time.monotonic()
    await asyncio.to_thread(cluster.start, victim)
    await system.wait_healthy(cluster.bootstrap(), s.topic.name, 3, 120)
    out["restart_to_full_isr_s"] = time.monotonic() - restarted
    for rate in rates:
        producers = 16 if rate <= 1000 else 64  # 16: the campaigns' closed-loop producers
        params = WorkloadParams(topic=s.topic.name, partitions=3, acks="all", rate=rate,
                                producers=producers, consumers=0, request_timeout_s=3, seed=1)
        path = scratch / f"history-{rate}.jsonl"
        with HistoryWriter(path) as history:
            workload = system.workload(params, cluster.bootstrap(), history)
            await workload.run(seconds)
        acked, lat = _latencies(path)
        out[f"rate_{rate}"] = {"producers": producers, "acked_per_s": acked / seconds,
                               "p50_ms": statistics.median(lat) if lat else None,
                               "p99_ms": lat[int(len(lat) * 0.99)] if lat else None}
    return out


def measure(system: str, rates: list[int], seconds: float, root: Path) -> dict:
    test = Test.of(_config(system, []), root / system.replace(":", "-"), check=False)
    sut = system_of(test)
    run_dir = root / f"{system.replace(':', '-')}-bench"
    run_dir.mkdir(parents=True)
    clock = RunClock()
    began = time.monotonic()
    with hosts_phase(test, run_dir) as (hosts, provider, toxiproxy):
        hosts_up = time.monotonic()
        with cluster_phase(test, hosts, provider, run_dir, clock, toxiproxy, sut) as cluster:
            nodes_started = time.monotonic()
            out = asyncio.run(_bench(test, sut, cluster, rates, seconds, run_dir))
    out["hosts_s"] = hosts_up - began
    out["start_nodes_s"] = nodes_started - hosts_up
    out["cluster_start_s"] = out["start_nodes_s"] + out["healthy_after_nodes_s"]
    return out


def whole_run(system: str, seconds: float, root: Path) -> dict:
    config = _config(system, [f"time_limit={seconds}", "nemesis.faults=['kill']",
                              "workload.rate=300"])
    began = time.monotonic()
    run_test(Test.of(config, root / f"{system.replace(':', '-')}-run"))
    wall = time.monotonic() - began
    return {"wall_s": wall, "workload_s": seconds, "wall_over_workload": wall / seconds}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--systems", default="embedded,kafka:4.2.1,kafka:3.9.1")
    ap.add_argument("--rates", default="300,100000")
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--run-seconds", type=float, default=20,
                    help="workload time of the whole checked run (0: skip it)")
    args = ap.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for system in args.systems.split(","):
            print(f"[bench] {system}", file=sys.stderr, flush=True)
            results[system] = measure(system, rates, args.seconds, Path(tmp))
            if args.run_seconds > 0:
                results[system]["run"] = whole_run(system, args.run_seconds, Path(tmp))
    print(json.dumps(results, indent=2))
    print(f"\n{'system':<14} {'start s':>8} {'restart s':>9} "
          + " ".join(f"{'acked/s@' + str(r):>15} {'p99 ms':>7}" for r in rates)
          + f" {'wall/workload':>13}")
    for system, r in results.items():
        cells = " ".join(f"{r[f'rate_{x}']['acked_per_s']:>15.0f} "
                         f"{(r[f'rate_{x}']['p99_ms'] or 0):>7.1f}" for x in rates)
        ratio = r.get("run", {}).get("wall_over_workload")
        shown = "-" if ratio is None else f"{ratio:.2f}"
        print(f"{system:<14} {r['cluster_start_s']:>8.1f} {r['restart_to_full_isr_s']:>9.1f} "
              f"{cells} {shown:>13}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
