"""The highest steady rate of acknowledged sends the harness sustains against a 5-host netns
cluster with no faults, the send latency at that rate, and the history bytes written per
operation.

    .venv/bin/python benchmarks/workload_rate.py [--rates 1000,2000,4000,8000] [--seconds 20]
                                                 [--budget-ms 10] [--results DIR] [--set KEY=VALUE ...]

Each target rate is one real `harness run` (no nemesis, checker skipped), with 2 consumers
and `rate * budget / 1000` producers (at least 4). Each producer has one send in flight, so
sends slower than `--budget-ms` (default 10) hold the producers below the rate asked: the
rate reached is then bounded by latency, not by what the cluster takes (on a shared machine
a send takes tens of ms: 20,000/s took `--budget-ms 50` and more, docs/replication.md).
Everything is counted from the history the run wrote: acknowledged sends per second of the time limit,
the median and p99 time from a send's invoke to its acknowledgement, and `unpaired`, the
sends left without a completion when the run ended (the history writer completes them as
`info`/`run-ended` at close; 0: every send's outcome is in the history). `cpu %` is the CPU
of this process and the run's nodes (the processes whose command line names the run's
cluster folder, `kch-<run>-`: the embedded nodes or Kafka's JVMs) over 7 s of the workload,
from 1 s after its history's first line, in % of one core (`wl %`: this process's part, the
workload and its history writer); `us/ack` is that CPU per acknowledged send (at the run's
average rate): on a shared machine the rates follow its load, the CPU per send much less.
`--set system.kind=kafka` measures Apache Kafka with the same workload (docs/kafka.md).

The hosts import this checkout's code (the netns provider puts it first on their
PYTHONPATH), so run it with this checkout first on PYTHONPATH too: from the checkout,
`PYTHONPATH=. .venv/bin/python benchmarks/workload_rate.py` (docs/replication.md has the
figures and how the code before a change was run beside it)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import msgspec

import harness
from harness.config import ConfigError, load_config
from harness.runner import run_test
from harness.test import Test

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # tests/support: scaffolding
from support.machine import what_ran  # noqa: E402


class _Op(msgspec.Struct):
    process: int | str
    type: str
    f: str
    time: int
    error: str | None = None


def _measure(history: Path, seconds: float) -> dict[str, float]:
    """Acknowledged sends/s, send latency percentiles (ms), ops, bytes/op, unpaired sends."""
    decode = msgspec.json.Decoder(_Op).decode
    invoked: dict[int | str, int] = {}
    latencies: list[int] = []
    ops = unpaired = 0
    with open(history, "rb") as f:
        for line in f:
            op = decode(line)
            ops += 1
            if op.f != "send":
                continue
            if op.type == "invoke":
                invoked[op.process] = op.time
            elif op.type == "ok":
                latencies.append(op.time - invoked.pop(op.process))
            else:
                invoked.pop(op.process, None)
                unpaired += op.error == "run-ended"
    latencies.sort()
    n = len(latencies)

    def pct(q: float) -> float:
        return latencies[min(n - 1, int(q * n))] / 1e6 if n else float("nan")
    return {"acked": n / seconds, "p50": pct(0.50), "p99": pct(0.99), "ops": ops,
            "per_op": history.stat().st_size / max(ops, 1), "unpaired": unpaired + len(invoked)}


CODE = Path(harness.__file__).resolve().parents[1]
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_ticks(run: str) -> dict[int, int]:
    """user + system ticks of this process and of every node of the run named `run`: its
    command line names the run's cluster folder (control/provider.py), whichever system."""
    mark = f"kch-{run}-".encode()
    pids = [os.getpid()]
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    if mark in f.read():
                        pids.append(int(entry.name))
            except OSError:  # gone, or not ours to read
                continue
    ticks = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ticks[pid] = int(fields[11]) + int(fields[12])  # utime, stime
        except OSError:
            continue
    return ticks


class _CpuWindow(threading.Thread):
    """The CPU seconds over `window` s of a run's workload, from 1 s after the first line of
    a history.jsonl under `root` written after `since`: in all (`cpu_s`) and of this process,
    the workload's (`workload_s`)."""

    def __init__(self, root: Path, since: float, window: float) -> None:
        super().__init__(daemon=True)
        self.root, self.since, self.window = root, since, window
        self.cpu_s = self.workload_s = self.elapsed = float("nan")

    def run(self) -> None:
        while not (started := [h for h in self.root.glob("workload-rate/*/history.jsonl")
                               if h.stat().st_mtime >= self.since and h.stat().st_size > 0]):
            time.sleep(0.1)
        run = started[0].parent.name
        time.sleep(1)
        before, t0 = _cpu_ticks(run), time.monotonic()
        time.sleep(self.window)
        after, t1 = _cpu_ticks(run), time.monotonic()
        self.cpu_s = sum(t - before[p] for p, t in after.items() if p in before) / _TICK
        self.workload_s = (after[os.getpid()] - before[os.getpid()]) / _TICK
        self.elapsed = t1 - t0


def _configs(ap: argparse.ArgumentParser, args: argparse.Namespace) -> list[tuple[int, int, dict]]:
    """(rate, producers, config) of each run, every one checked before the first starts: a
    rate and budget that need more producers than the config allows, or a bad --set, end the
    script with the config's one-line error (exit 2), not a traceback after earlier runs."""
    try:
        rates = [int(r) for r in args.rates.split(",")]
    except ValueError:
        ap.error(f"--rates: expected integers separated by commas, got {args.rates!r}")
    runs = []
    for rate in rates:
        producers = max(4, round(rate * args.budget_ms / 1000))
        try:
            config = load_config(None, [f"workload.rate={rate}", f"workload.producers={producers}",
                                        "workload.consumers=2", "nemesis.faults=[]",
                                        f"time_limit={args.seconds}", "name=workload-rate",
                                        *args.set])
        except ConfigError as e:
            ap.error(f"{rate}/s with --budget-ms {args.budget_ms:g}: {e}")
        runs.append((rate, producers, config))
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="1000,2000,4000,8000")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--budget-ms", type=float, default=10,
                    help="the send latency each producer's share of the rate allows")
    ap.add_argument("--results", type=Path, help="keep the runs here (default: a temporary folder)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for every run")
    args = ap.parse_args()
    print(what_ran(), flush=True)
    runs = _configs(ap, args)
    print(f"code: {CODE}")
    print(f"{'target/s':>9} {'producers':>9} {'acked/s':>9} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'unpaired':>8} {'ops':>9} {'bytes/op':>9} {'cpu %':>6} {'wl %':>5} {'us/ack':>6}  load")
    with tempfile.TemporaryDirectory() as tmp:
        root = args.results or Path(tmp)
        for rate, producers, config in runs:
            cpu = _CpuWindow(root, time.time(), min(7.0, max(1.0, args.seconds - 2)))
            cpu.start()
            run_dir = run_test(Test.of(config, root, check=False))
            load = os.getloadavg()[0]
            m = _measure(run_dir / "history.jsonl", args.seconds)
            cpu.join(timeout=0)
            share = cpu.cpu_s / cpu.elapsed
            print(f"{rate:>9} {producers:>9} {m['acked']:>9.0f} {m['p50']:>7.1f} {m['p99']:>7.1f} "
                  f"{m['unpaired']:>8} {m['ops']:>9} {m['per_op']:>9.1f} {100 * share:>6.0f} "
                  f"{100 * cpu.workload_s / cpu.elapsed:>5.0f} "
                  f"{1e6 * share / m['acked']:>6.0f}  {load:.1f}", flush=True)


if __name__ == "__main__":
    main()
