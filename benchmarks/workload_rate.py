"""The highest steady rate of acknowledged sends the harness sustains against a 5-host netns
cluster with no faults, and the history bytes written per operation.

    .venv/bin/python benchmarks/workload_rate.py [--rates 1000,2000,4000,8000] [--seconds 20]

Each target rate is one real `harness run` (no nemesis, checker skipped); the acknowledged
rate is counted from the history it wrote."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from harness.config import load_config
from harness.runner import run_test
from harness.test import Test


def _measure(history: Path, seconds: float) -> tuple[float, float, int]:
    ops = 0
    ok_sends = 0
    with open(history) as f:
        for line in f:
            op = json.loads(line)
            ops += 1
            if op["f"] == "send" and op["type"] == "ok":
                ok_sends += 1
    return ok_sends / seconds, history.stat().st_size / max(ops, 1), ops


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="1000,2000,4000,8000")
    ap.add_argument("--seconds", type=float, default=20)
    args = ap.parse_args()
    print(f"{'target/s':>9} {'producers':>9} {'acked/s':>9} {'ops':>9} {'bytes/op':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for rate in (int(r) for r in args.rates.split(",")):
            producers = max(4, rate // 100)
            config = load_config(None, [f"workload.rate={rate}", f"workload.producers={producers}",
                                        "workload.consumers=2", "nemesis.faults=[]",
                                        f"time_limit={args.seconds}", "name=workload-rate"])
            run_dir = run_test(Test.of(config, Path(tmp), check=False))
            acked, per_op, ops = _measure(run_dir / "history.jsonl", args.seconds)
            print(f"{rate:>9} {producers:>9} {acked:>9.0f} {ops:>9} {per_op:>9.1f}", flush=True)


if __name__ == "__main__":
    main()
