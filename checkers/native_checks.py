"""The checks of definitions.py, natively: `histcheck`, a Rust program (native/histingest,
src/bin/histcheck) that reads the ops and reads Parquet tables and checks each Kafka
partition on its own thread.

Every anomaly is about one partition, so a history can be checked in shares of its
partitions (`share=(r, k)`: the partitions p with p mod k == r) and the shares' outputs
merged: counts add up, each anomaly's examples are the first by the reference's sort key
(which starts with the partition, or with an operation index that no two partitions share),
and the rows without a partition are counted by share 0 alone. The Spark checker
(spark_checks.run) runs one share per task; run() here is the same program on one machine.

It holds the rows of the partitions it checks in memory (at peak, one partition at a time,
about 1.2 GB for the benchmark's 10M operations and 18M records read, 10 GB for 100M), so
Spark's tasks give it a memory limit: past it, it stops as it loads (ShareTooBigError) and
the SQL plans check instead. On the tables ingest.py writes, clustered by partition, it reads
only the row groups of its share (each output says how many it read, "row_groups_read") and
loads and checks the share in waves of `at_once` partitions (by default one, or as many as
`threads` when the share holds at least twice as many partitions), the threads left over
going to each partition's own load and checks: a Spark task (`at_once=1`, every core of its
machine) holds one partition's rows at a time (two where both fit its memory limit: the next
then loads while one is checked), and uses the cores the other tasks leave idle once they
are done.
tests/checkers/test_native_checks.py holds it to the pandas reference's exact results.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from checkers.definitions import EXAMPLE_ORDER, EXAMPLES
from checkers.native_ingest import binary as _binary
from checkers.verdict import UNREAD_COLUMNS, UNREAD_INTS, CheckOutput, exact_rows

BINARY = "histcheck"
P = "partition"

TOO_BIG = 5  # histcheck's exit status past --memory-limit (native/histingest/.../main.rs)


class NativeCheckError(Exception):
    """histcheck could not check these tables (it says why); no verdict."""


class ShareTooBigError(NativeCheckError):
    """The rows of a share would not fit the memory limit it was given; nothing checked."""

    @property
    def share(self) -> tuple[int, int] | None:
        """The share (r, k) that did not fit, from the message check_share wrote (a Spark
        task's failure reaches the driver as its text only); None when it names none."""
        found = re.search(r"\bshare (\d+)/(\d+) needs more than", str(self))
        return (int(found[1]), int(found[2])) if found else None


def binary() -> str | None:
    """The histcheck program, or None when it is not built."""
    return _binary(BINARY)


def check_share(ops_path: Path, reads_path: Path, acks: str, examples: int,
                share: tuple[int, int] = (0, 1), threads: int | None = None,
                memory_limit: int | None = None, at_once: int | None = None) -> dict[str, Any]:
    """histcheck's raw output (JSON) for one share of the partitions, on `threads` threads
    (default: every core) with `at_once` partitions loaded at a time (default: histcheck's,
    one or `threads`: see its main.rs)."""
    program = binary()
    if program is None:
        raise NativeCheckError(f"{BINARY} is not built (make bootstrap builds it)")
    cmd = [program, str(ops_path), str(reads_path), "--acks", acks, "--examples", str(examples),
           "--share", f"{share[0]}/{share[1]}", "--threads", str(threads or os.cpu_count() or 1)]
    if memory_limit is not None:
        cmd += ["--memory-limit", str(memory_limit)]
    if at_once is not None:
        cmd += ["--at-once", str(at_once)]
    done = subprocess.run(cmd, capture_output=True, check=False)
    if done.returncode == TOO_BIG:
        raise ShareTooBigError(f"share {share[0]}/{share[1]} needs more than {memory_limit} bytes")
    if done.returncode != 0:
        raise NativeCheckError(f"{BINARY} failed: {_why(done)}")
    return json.loads(done.stdout)


def estimate(ops_path: Path, reads_path: Path, share: tuple[int, int] = (0, 1),
             threads: int | None = None, at_once: int | None = None) -> list[int] | None:
    """The memory each wave of `share` would need, by the estimate histcheck's memory limit
    stops by, from the tables' footers alone (no row read; `histcheck --estimate`); None
    when the tables are not clustered by partition, where nothing tells before loading."""
    program = binary()
    if program is None:
        raise NativeCheckError(f"{BINARY} is not built (make bootstrap builds it)")
    cmd = [program, str(ops_path), str(reads_path), "--acks", "all", "--examples", "0",
           "--share", f"{share[0]}/{share[1]}", "--threads", str(threads or os.cpu_count() or 1),
           "--estimate"]
    if at_once is not None:
        cmd += ["--at-once", str(at_once)]
    done = subprocess.run(cmd, capture_output=True, check=False)
    if done.returncode != 0:
        raise NativeCheckError(f"{BINARY} --estimate failed: {_why(done)}")
    return json.loads(done.stdout)["waves"]


def _why(done: subprocess.CompletedProcess) -> str:
    """What a failed histcheck said last on stderr (or its exit status), cut short."""
    last = done.stderr.decode(errors="replace").strip().splitlines()[-1:]
    return (last[0] if last else f"exit {done.returncode}")[:300]


def merge(shares: list[dict[str, Any]], examples: int) -> dict[str, Any]:
    """One output from the outputs of disjoint shares (see the module's docstring)."""
    anomalies = {}
    for name, order in EXAMPLE_ORDER.items():
        found = [e for s in shares for e in s["anomalies"][name][1]]
        found.sort(key=lambda e: [e[c] for c in order])  # stable: a partition's own order
        anomalies[name] = [sum(s["anomalies"][name][0] for s in shares), found[:examples]]
    stats: dict[str, Any] = {"ops": 0, "ops_by_f_type": {}, "reads": 0,
                             "acked_by_partition": {}, "info_sends_read": 0}
    for s in shares:
        st = s["stats"]
        for key in ("ops", "reads", "info_sends_read"):
            stats[key] += st[key]
        for key in ("ops_by_f_type", "acked_by_partition"):
            for k, n in st[key].items():
                stats[key][k] = stats[key].get(k, 0) + n
    stats["ops_by_f_type"] = dict(sorted(stats["ops_by_f_type"].items()))
    stats["acked_by_partition"] = dict(sorted(stats["acked_by_partition"].items(),
                                              key=lambda kv: int(kv[0])))
    return {
        "row_groups_read": sum(s.get("row_groups_read", 0) for s in shares),
        "anomalies": anomalies,
        # by partition, as one run lists them (stable: each partition's own order)
        "unread": sorted((u for s in shares for u in s["unread"]), key=lambda u: u[P]),
        "complete_partitions": sorted(p for s in shares for p in s["complete_partitions"]),
        "stats": stats,
    }


def to_output(raw: dict[str, Any]) -> CheckOutput:
    return CheckOutput(
        anomalies={name: (n, ex) for name, (n, ex) in raw["anomalies"].items()},
        unread=exact_rows(raw["unread"], UNREAD_COLUMNS, UNREAD_INTS),
        complete_partitions=set(raw["complete_partitions"]),
        stats=raw["stats"],
    )


def run(ops_path: Path, reads_path: Path, acks: str, examples: int = EXAMPLES,
        threads: int | None = None) -> CheckOutput:
    """Check both tables in this process's machine, every partition at once."""
    return to_output(check_share(ops_path, reads_path, acks, examples, threads=threads))
