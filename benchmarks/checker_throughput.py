"""Checker throughput, stage by stage: native ingest, Spark session start, the Spark check on
local[2], and the single-process pandas reference, each size run 3 times (medians).

Generates synthetic Kafka histories shaped like workloads/kafka.py's (producers, tailing
consumers, then a final read that reads each partition whole until two reads agree), with a
few injected anomalies (lost writes, reads of failed sends, stale reads), then prints each
stage's time per run and the median, the Spark/pandas ratio, and the peak memory of this
process (ingest and pandas) and of the Spark driver JVM.

    .venv/bin/python benchmarks/checker_throughput.py --sizes 1000000,10000000 --no-linearizability
    .venv/bin/python benchmarks/checker_throughput.py --sizes 100000 --runs 1   # quick
    ... --exact-ingest     # also time the exact (line-by-line Python) ingest path, once
    ... --no-pandas        # skip the reference (it needs about 1 GB per million ops)

At the end it runs benchmarks/linearizability_bench.py's main() when that exists.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from checkers import reference, spark_checks  # noqa: E402
from checkers.ingest import ingest  # noqa: E402
from checkers.spark import get_session  # noqa: E402
from checkers.verdict import classify_unread  # noqa: E402

PARTITIONS = 3
PRODUCERS = 4
CONSUMERS = 2
SENDS_PER_ROUND = 60
FINAL_READS = 2  # whole-partition final-polls per partition: the last two agreed
INJECT_EVERY = 50_000  # sends between injected anomalies


class Generator:
    """Writes a history line by line; each op 1 µs after the previous."""

    def __init__(self, fh, seed: int) -> None:
        self.fh = fh
        self.rng = random.Random(seed)
        self.index = 0
        self.logs: list[list[int]] = [[] for _ in range(PARTITIONS)]
        self.positions = [[0] * PARTITIONS for _ in range(CONSUMERS)]
        self.value = 0
        self.sends = 0
        self.rounds = 0
        self.injected = {"lost-write": 0, "aborted-read": 0, "stale-read": 0}

    def op(self, body: str) -> None:
        self.fh.write(f'{{"index": {self.index}, "time": {self.index * 1000}, {body}}}\n')
        self.index += 1

    def send(self, p: int) -> None:
        proc = self.rng.randrange(PRODUCERS)
        v = self.value
        self.value += 1
        self.sends += 1
        self.op(f'"process": {proc}, "type": "invoke", "f": "send", "partition": {p}, "value": {v}')
        log = self.logs[p]
        inject = self.sends % INJECT_EVERY
        if inject == 1:  # a definitely failed send that the log holds anyway
            self.op(f'"process": {proc}, "type": "fail", "f": "send", "partition": {p}, '
                    f'"value": {v}, "error": "NOT_ENOUGH_REPLICAS"')  # fmt: skip
            log.append(v)
            self.injected["aborted-read"] += 1
            return
        offset = len(log)
        self.op(f'"process": {proc}, "type": "ok", "f": "send", "partition": {p}, "value": {v}, '
                f'"offset": {offset}, "node": {p + 1}, "epoch": 1')  # fmt: skip
        # a lost write: acked, but the log gets a placeholder nobody wrote
        log.append(-1 if inject == 2 else v)
        self.injected["lost-write"] += inject == 2

    def poll(self, c: int, p: int, f: str = "poll", limit: int = 500) -> None:
        start = self.positions[c][p]
        log = self.logs[p]
        hwm = len(log)
        stale_round = self.rounds % (INJECT_EVERY // SENDS_PER_ROUND) == 1
        if f == "poll" and stale_round and (c, p) == (0, 0) and start < len(log):
            hwm = start  # stale: the reply claims the log ends before acked records
            self.injected["stale-read"] += 1
        proc = f"c{c}" if f == "poll" else f"f{c}"
        self.op(f'"process": "{proc}", "type": "invoke", "f": "{f}", "partition": {p}, '
                f'"offset": {start}')  # fmt: skip
        end = min(hwm, start + limit)
        recs = ", ".join(f"[{o}, {log[o]}]" for o in range(start, end) if log[o] >= 0)
        self.op(f'"process": "{proc}", "type": "ok", "f": "{f}", "partition": {p}, '
                f'"records": [{recs}], "hwm": {hwm}')  # fmt: skip
        self.positions[c][p] = max(start, end)

    def run(self, n_ops: int) -> None:
        while self.index < n_ops - 1 - 2 * FINAL_READS * PARTITIONS:
            self.rounds += 1
            for _ in range(SENDS_PER_ROUND):
                self.send(self.rng.randrange(PARTITIONS))
            for c in range(CONSUMERS):
                for p in range(PARTITIONS):
                    self.poll(c, p)
        self.op('"process": "nemesis", "type": "info", "f": "stop-partition", "value": null')
        for _ in range(FINAL_READS):
            for p in range(PARTITIONS):
                self.positions.append([0] * PARTITIONS)
                self.poll(len(self.positions) - 1, p, "final-poll", len(self.logs[p]))


def generate(path: Path, n_ops: int) -> Generator:
    with open(path, "w", buffering=1 << 20) as fh:
        g = Generator(fh, seed=n_ops)
        g.run(n_ops)
    return g


def timed(fn, *args, **kwargs):
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t


def summary(out) -> dict[str, int]:
    found = {name: n for name, (n, _) in out.anomalies.items() if n}
    found.update(classify_unread(out)["kind"].value_counts().to_dict())
    return dict(sorted(found.items()))


def peak_rss_mib(pid: int | None = None) -> float:
    """Peak resident memory (VmHWM) of a process, this one by default."""
    if pid is None:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def jvm_pid(spark) -> int | None:
    proc = getattr(spark.sparkContext._gateway, "proc", None)
    return getattr(proc, "pid", None)


def stage(name: str, times: list[float], n: int) -> float:
    med = statistics.median(times)
    runs = " / ".join(f"{t:.1f}" for t in times)
    print(f"{name:34s} median {med:7.1f} s  {n / med:12,.0f} ops/s   runs: {runs} s")
    return med


def bench(size: int, work: Path, spark, args: argparse.Namespace) -> None:
    hist = work / f"history-{size}.jsonl"
    g, t_gen = timed(generate, hist, size)
    pq_dir = work / f"pq-{size}"
    ingests = []
    for _ in range(args.runs):
        shutil.rmtree(pq_dir, ignore_errors=True)
        ing, t = timed(ingest, hist, pq_dir)
        assert ing.path == "native", ing.path
        ingests.append(t)
    n = ing.ops
    print(f"\n== {n:,} ops ({ing.reads:,} records read), history {hist.stat().st_size >> 20} MiB,"
          f" generated in {t_gen:.1f} s; injected {g.injected}; load average "
          f"{os.getloadavg()[0]:.1f}")  # fmt: skip
    t_ing = stage("ingest, native (jsonl -> parquet)", ingests, n)
    if args.exact_ingest:
        exact_dir = work / f"exact-{size}"
        _, t = timed(ingest, hist, exact_dir, native=False)
        stage("ingest, exact path (before)", [t], n)
        shutil.rmtree(exact_dir)
    sparks = []
    for _ in range(args.runs):
        s_out, t = timed(spark_checks.run, spark, ing.ops_path, ing.reads_path, "all")
        sparks.append(t)
    s_sum = summary(s_out)
    t_spark = stage("check, Spark local[2] (warm)", sparks, n)
    ends = [a + b for a, b in zip(ingests, sparks, strict=True)]
    stage("end to end: ingest + Spark check", ends, n)
    if not args.no_pandas:
        refs = []
        for _ in range(args.runs):
            r_out, t = timed(reference.run, ing.ops_path, ing.reads_path, "all")
            refs.append(t)
        t_ref = stage("check, single-process pandas", refs, n)
        print(f"{'Spark speed-up over pandas':34s} {t_ref / t_spark:7.2f}x (medians)")
        r_sum = summary(r_out)
        if r_sum != s_sum:
            print(f"MISMATCH (reference) {r_sum}")
        del r_out
    print(f"{'Spark / ingest share of end to end':34s} {t_spark / (t_ing + t_spark):.0%} / "
          f"{t_ing / (t_ing + t_spark):.0%}")
    print(f"peak memory: this process {peak_rss_mib():,.0f} MiB, Spark driver JVM "
          f"{peak_rss_mib(jvm_pid(spark)):,.0f} MiB (so far)")
    print(f"anomalies (Spark)     {s_sum}")
    missed = {k: (n, s_sum.get(k, 0)) for k, n in g.injected.items() if s_sum.get(k, 0) != n}
    print(f"MISSED injected anomalies (injected, found): {missed}" if missed
          else "every injected anomaly found")  # fmt: skip
    hist.unlink()
    shutil.rmtree(pq_dir)


def run_linearizability_bench() -> None:
    path = Path(__file__).with_name("linearizability_bench.py")
    if not path.exists():
        print("\n(benchmarks/linearizability_bench.py not present: skipped)")
        return
    spec = importlib.util.spec_from_file_location("linearizability_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if not hasattr(mod, "main"):
        print("\n(linearizability_bench.py has no main(): skipped)")
        return
    print("\n== linearizability_bench.main()")
    mod.main([]) if inspect.signature(mod.main).parameters else mod.main()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="1000000,10000000",
                    help="comma-separated history sizes in operations")  # fmt: skip
    ap.add_argument("--runs", type=int, default=3, help="runs of each stage (median)")
    ap.add_argument("--master", default="local[2]", help="Spark master")
    ap.add_argument("--workdir", type=Path, help="where to write histories (default: a temp dir)")
    ap.add_argument("--exact-ingest", action="store_true",
                    help="also time the exact (line-by-line) ingest path once")
    ap.add_argument("--no-pandas", action="store_true", help="skip the pandas reference")
    ap.add_argument("--no-linearizability", action="store_true")
    args = ap.parse_args(argv)
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",")]
    spark, t = timed(get_session, args.master)
    print(f"session start, Spark {args.master}: {t:.1f} s (once; every check below reuses it)")
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        for size in sizes:
            bench(size, Path(tmp), spark, args)
    if not args.no_linearizability:
        run_linearizability_bench()


if __name__ == "__main__":
    main()
