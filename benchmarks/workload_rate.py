"""The highest steady rate of acknowledged sends the harness sustains against a 5-host netns
cluster with no faults, the send latency at that rate, and the history bytes written per
operation.

    .venv/bin/python benchmarks/workload_rate.py [--rates 1000,2000,4000,8000] [--seconds 20]
                                                 [--budget-ms 10] [--results DIR] [--set KEY=VALUE ...]

Each target rate is one real `harness run` (no nemesis, checker skipped), with 2 consumers
and `rate * budget / 1000` producers (at least 4). Each producer has one send in flight, so
sends slower than `--budget-ms` (default 10) hold the producers below the rate asked: the
rate reached is then bounded by latency, not by what the cluster takes. Everything is
counted from the history the run wrote: acknowledged sends per second of the time limit,
the median and p99 time from a send's invoke to its acknowledgement, and `unpaired`, the
sends left without a completion when the run ended (the history writer completes them as
`info`/`run-ended` at close; 0: every send's outcome is in the history).

The hosts import this checkout's code (the netns provider puts it first on their
PYTHONPATH), so run it with this checkout first on PYTHONPATH too: from the checkout,
`PYTHONPATH=. .venv/bin/python benchmarks/workload_rate.py` (docs/replication.md has the
figures and how the code before a change was run beside it)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import msgspec

import harness
from harness.config import load_config
from harness.runner import run_test
from harness.test import Test


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
    print(f"code: {Path(harness.__file__).resolve().parents[1]}")
    print(f"{'target/s':>9} {'producers':>9} {'acked/s':>9} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'unpaired':>8} {'ops':>9} {'bytes/op':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        root = args.results or Path(tmp)
        for rate in (int(r) for r in args.rates.split(",")):
            producers = max(4, round(rate * args.budget_ms / 1000))
            config = load_config(None, [f"workload.rate={rate}", f"workload.producers={producers}",
                                        "workload.consumers=2", "nemesis.faults=[]",
                                        f"time_limit={args.seconds}", "name=workload-rate",
                                        *args.set])
            run_dir = run_test(Test.of(config, root, check=False))
            m = _measure(run_dir / "history.jsonl", args.seconds)
            print(f"{rate:>9} {producers:>9} {m['acked']:>9.0f} {m['p50']:>7.1f} {m['p99']:>7.1f} "
                  f"{m['unpaired']:>8} {m['ops']:>9} {m['per_op']:>9.1f}", flush=True)


if __name__ == "__main__":
    main()
