"""The simulating side of harness.pypy.PypySimulator: a loop, normally under PyPy, that reads
one job per line on stdin ({"config", "folder", "invariants", "keep_going"}; the config is a
TestConfig's record(), loaded back with TestConfig.load), simulates it into
its folder with harness.sim_run.simulate_into (keep_going unless the job says otherwise, as a
search runs a seed; `harness simulate --check-determinism` runs its second copy here with
keep_going false, as the first), and answers one JSON line per job on stdout: virtual_s,
wall_s, cpu_s, stats, net; or {"error": "..."}.

Anything the simulation prints goes to stderr: stdout carries only the answers.
It imports nothing beyond the simulation's closure (see harness/pypy.py)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import IO, Any

from harness.config import TestConfig
from harness.sim_run import simulate_into
from harness.test import Test


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    folder = Path(job["folder"])
    cpu = time.process_time()
    config = TestConfig.load(job["config"], source="the job's config")
    result = simulate_into(Test.of(config, folder, check=False), folder,
                           keep_going=job.get("keep_going", True),
                           invariants=job.get("invariants", True))
    return {"virtual_s": result.virtual_s, "wall_s": result.wall_s,
            "cpu_s": time.process_time() - cpu, "stats": result.stats, "net": result.net}


def serve(jobs: IO[str], answers: IO[str]) -> None:
    for line in jobs:
        try:
            reply = run_job(json.loads(line))
        except Exception as e:  # this seed's error; the next job still runs
            reply = {"error": f"{type(e).__name__}: {e}"}
        answers.write(json.dumps(reply) + "\n")
        answers.flush()


def main() -> None:
    answers = sys.stdout
    sys.stdout = sys.stderr
    serve(sys.stdin, answers)


if __name__ == "__main__":
    main()
