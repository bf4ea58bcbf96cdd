"""Checker throughput, stage by stage: native ingest, Spark session start, the Spark check,
and three single-process baselines on the same Parquet tables, histcheck (the native checks
alone, without Spark), DuckDB and pandas; each stage of each size run 3 times (medians).

Generates synthetic Kafka histories shaped like workloads/kafka.py's (producers, tailing
consumers, then a final read that reads each partition whole until two reads agree), with a
few injected anomalies (lost writes, reads of failed sends, stale reads), then prints each
stage's time per run and the median, Spark against the best single-process baseline, and the
peak memory of the native children (histingest, histcheck), of this process (DuckDB
and pandas), of the Spark driver JVM and of the executors. Every backend must find every
injected anomaly, and they must agree.

    .venv/bin/python benchmarks/checker_throughput.py --sizes 1000000,10000000 --no-linearizability
    .venv/bin/python benchmarks/checker_throughput.py --sizes 100000 --runs 1   # quick
    ... --exact-ingest     # also time the exact (line-by-line Python) ingest path, once
    ... --no-pandas        # skip the pandas reference (about 1.5 GB per million ops, in a
                           # process of its own)
    ... --spark-plan sql   # Spark's SQL plans instead of native tasks (auto: native if it fits)
    ... --sql-too          # time the SQL plans as well as the plan asked for
    ... --standalone 2     # a standalone cluster from the installed pyspark: master and 2
                           # workers on 127.0.0.1, instead of local[2]
    ... --history H.jsonl --injected '{"lost-write": 910, ...}'   # an existing history
    ... --tables DIR --injected ...   # existing ops/reads Parquet tables: no ingest stage
    ... --cold             # also whole checks as a user runs one: `python -m checkers`, a
                           # new process each, its own Spark session (--cold-before TREE: the
                           # same command from that checkout too, alternating)
    ... --before-tools /work/main/.venv/bin   # also, in the same run and Spark session, an
                           # earlier build's histingest, the Spark check of its tables, and
                           # its histcheck alone: "before" beside each "after" stage, the two
                           # alternating run by run and taking turns at going first

At the end it runs benchmarks/linearizability_bench.py's main() when that exists.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import importlib.util
import inspect
import json
import multiprocessing
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # tests/support: scaffolding

from support import spark_cluster  # noqa: E402
from support.machine import what_ran  # noqa: E402

from checkers import native_checks, reference, spark_checks, spark_native  # noqa: E402
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


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
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
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def jvm_pid(spark) -> int | None:
    proc = getattr(spark.sparkContext._gateway, "proc", None)
    return getattr(proc, "pid", None)


def executors(workers: list[int]) -> list[int]:
    """The executor JVMs that the standalone workers `workers` launched (their children)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid in workers and b"CoarseGrainedExecutorBackend" in cmdline:
            found.append(int(stat.parent.name))
    return found


def du_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / (1 << 20)


def stage(name: str, times: list[float], n: int) -> float:
    med = statistics.median(times)
    runs = " / ".join(f"{t:.1f}" for t in times)
    print(f"{name:38s} median {med:7.1f} s  {n / med:12,.0f} ops/s   runs: {runs} s", flush=True)
    return med


@contextlib.contextmanager
def standalone(workers: int, memory: str, work: Path) -> Iterator[tuple[str, list[int]]]:
    """tests/support/spark_cluster.py's cluster of `workers` one-core workers: (master URL, worker
    pids), with its start time printed."""
    t = time.perf_counter()
    with spark_cluster.standalone(work, workers=workers, cores=1, memory=memory) as cluster:
        print(f"standalone cluster {cluster.url}: master and {workers} worker(s) of 1 core and "
              f"{memory} started in {time.perf_counter() - t:.1f} s")
        yield cluster.url, cluster.worker_pids


def _runs(args: argparse.Namespace, fn: Callable[..., Any], *a: Any,
          **kw: Any) -> tuple[Any, list[float]]:
    times = []
    out = None
    for _ in range(args.runs):
        out, t = timed(fn, *a, **kw)
        times.append(t)
    return out, times


def _paired(args: argparse.Namespace, after: Callable[[], Any],
            before: Callable[[], Any] | None,
            warm: bool = False) -> tuple[Any, list[float], Any, list[float]]:
    """args.runs runs of `after` and, given, of `before` (the earlier build's same stage),
    alternating and taking turns at going first, so a load that drifts during the run is
    shared by both: (after's last output, its times, before's last output, its times).
    `warm`: with a `before`, one untimed run first, so that neither side pays for the warm-up
    of what they share (the Spark session's first job)."""
    if before is None:
        return (*_runs(args, after), None, [])
    if warm:
        after()
    outs: dict[str, Any] = {}
    times: dict[str, list[float]] = {"after": [], "before": []}
    for i in range(args.runs):
        order = [("after", after), ("before", before)]
        for name, fn in order if i % 2 == 0 else reversed(order):
            outs[name], t = timed(fn)
            times[name].append(t)
    return outs["after"], times["after"], outs["before"], times["before"]


class Before:
    """An earlier build's stages (args.before_tools) on the same history, called as it was:
    its histingest into tables of its own, then its Spark check and histcheck alone."""

    def __init__(self, tools: Path, history: Path | None, tables: Path | None, work: Path) -> None:
        self.tools, self.history = tools, history
        self.tables = tables if tables is not None else work / "tables-before"
        self.owned = tables is None

    def ingest(self) -> None:
        assert self.history is not None
        self.tables.mkdir(exist_ok=True)
        subprocess.run([str(self.tools / "histingest"), str(self.history), str(self.ops),
                        str(self.reads), "--threads", str(os.cpu_count() or 1)],
                       check=True, capture_output=True)

    def histcheck(self) -> None:
        subprocess.run([str(self.tools / "histcheck"), str(self.ops), str(self.reads),
                        "--acks", "all", "--examples", "8"], check=True, capture_output=True)

    @property
    def ops(self) -> Path:
        return self.tables / "ops.parquet"

    @property
    def reads(self) -> Path:
        return self.tables / "reads.parquet"

    def close(self) -> None:
        if self.owned:
            shutil.rmtree(self.tables, ignore_errors=True)


def bench(history: Path | None, tables: Path | None, injected: dict[str, int], work: Path,
          spark, workers: list[int], args: argparse.Namespace) -> None:
    """Every stage of one history (or of its tables, already ingested), args.runs times; with
    --before-tools each stage alternates with the earlier build's same stage."""
    earlier = (Before(args.before_tools, history, args.tables and args.before_tables, work)
               if args.before_tools else None)
    ingests: list[float] = []
    ingests_before: list[float] = []
    if tables is None:
        assert history is not None
        tables = work / "tables"

        def ingest_once() -> Any:
            shutil.rmtree(tables, ignore_errors=True)
            return ingest(history, tables)

        ing, ingests, _, ingests_before = _paired(args, ingest_once,
                                                  earlier and earlier.ingest)
        assert ing.path == "native", ing.path
        n, reads = ing.ops, ing.reads
    else:
        import pyarrow.parquet as pq

        n = pq.read_metadata(tables / "ops.parquet").num_rows
        reads = pq.read_metadata(tables / "reads.parquet").num_rows
    ops_path, reads_path = tables / "ops.parquet", tables / "reads.parquet"
    size = f", history {history.stat().st_size >> 20:,} MiB" if history else ""
    print(f"\n== {n:,} ops ({reads:,} records read){size}, tables {du_mib(tables):,.0f} MiB;"
          f" injected {injected}; load average {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    t_ing = stage("ingest, native (jsonl -> parquet)", ingests, n) if ingests else 0.0
    t_ing_before = stage("ingest, native, BEFORE", ingests_before, n) if ingests_before else 0.0
    if args.exact_ingest and history is not None:
        exact_dir = work / "exact"
        _, t = timed(ingest, history, exact_dir, native=False)
        stage("ingest, exact path (before)", [t], n)
        shutil.rmtree(exact_dir)
    master = spark.sparkContext.master

    def check(ops: Path, reads: Path) -> Callable[[], Any]:
        return lambda: spark_checks.run(spark, ops, reads, "all", plan=args.spark_plan)

    s_out, sparks, b_out, sparks_before = _paired(
        args, check(ops_path, reads_path), earlier and check(earlier.ops, earlier.reads),
        warm=True)
    t_spark = stage(f"check, Spark {master} ({args.spark_plan}, warm)", sparks, n)
    found = {"Spark": summary(s_out)}
    del s_out
    if ingests:
        stage("end to end: ingest + Spark check",
              [a + b for a, b in zip(ingests, sparks, strict=True)], n)  # fmt: skip
    if earlier is not None:
        print(f"  (before: tables clustered by partition: "
              f"{spark_native.clustered(earlier.ops, earlier.reads)})")
        t_spark_before = stage("check, Spark, BEFORE", sparks_before, n)
        found["Spark before"] = summary(b_out)
        if ingests_before:
            stage("end to end, BEFORE",
                  [a + b for a, b in zip(ingests_before, sparks_before, strict=True)], n)
        ratio = f"ingest {t_ing_before / t_ing:.2f}x, " if ingests else ""
        print(f"{'after over before (medians)':38s} {ratio}Spark check "
              f"{t_spark_before / t_spark:.2f}x")
    if args.sql_too and args.spark_plan != "sql":
        q_out, sqls = _runs(args, spark_checks.run, spark, ops_path, reads_path, "all",
                            plan="sql")
        stage(f"check, Spark {master} (SQL plans, warm)", sqls, n)
        found["Spark SQL"] = summary(q_out)
        del q_out
    baselines: dict[str, float] = {}
    if not args.no_native:
        h_out, natives, _, natives_before = _paired(
            args, lambda: native_checks.run(ops_path, reads_path, "all"),
            earlier and earlier.histcheck)
        baselines["histcheck"] = stage("check, single-process histcheck", natives, n)
        if natives_before:
            stage("check, histcheck alone, BEFORE", natives_before, n)
        found["histcheck"] = summary(h_out)
        del h_out
    if not args.no_duckdb:
        from support import duck_checks  # the `baseline` extra's duckdb, only when asked for

        d_out, ducks = _runs(args, duck_checks.run, ops_path, reads_path, "all")
        baselines["DuckDB"] = stage("check, single-process DuckDB", ducks, n)
        found["DuckDB"] = summary(d_out)
        del d_out
        if ingests:
            stage("end to end: ingest + DuckDB check",
                  [a + b for a, b in zip(ingests, ducks, strict=True)], n)  # fmt: skip
    native_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # reaped children
    pandas_peak = ""
    if not args.no_pandas:
        runs = [_pandas_apart(ops_path, reads_path) for _ in range(args.runs)]
        baselines["pandas"] = stage("check, single-process pandas", [t for _, t, _ in runs], n)
        found["pandas"] = runs[-1][0]
        pandas_peak = f"pandas's own process {max(m for _, _, m in runs):,.0f} MiB, "
    for name, t in baselines.items():
        print(f"{'Spark speed-up over ' + name:38s} {t / t_spark:7.2f}x (medians)")
    if ingests:
        print(f"{'Spark / ingest share of end to end':38s} {t_spark / (t_ing + t_spark):.0%} / "
              f"{t_ing / (t_ing + t_spark):.0%}")
    executor_peaks = ", ".join(f"{peak_rss_mib(p):,.0f}" for p in executors(workers))
    print("peak memory: " + (f"native children (ingest, histcheck) {native_peak:,.0f} MiB, "
                             if ingests or not args.no_native else "")
          + f"{pandas_peak}this process (DuckDB) {peak_rss_mib():,.0f} MiB, Spark "
          f"driver JVM {peak_rss_mib(jvm_pid(spark)):,.0f} MiB"
          + (f", executors {executor_peaks} MiB" if workers else "") + " (so far)")  # fmt: skip
    for name, s in found.items():
        print(f"anomalies ({name}){' ' * (8 - len(name))}{s}")
        missed = _missed(injected, s)
        if missed:
            print(f"MISSED by {name}: injected anomalies (injected, found): {missed}")
    agree = all(s == found["Spark"] for s in found.values())
    print(f"every injected anomaly found by {', '.join(found)}; they agree" if agree
          and not any(_missed(injected, s) for s in found.values())
          else "MISMATCH between backends or injected anomalies missed (above)")  # fmt: skip
    if history is not None and args.tables is None:
        shutil.rmtree(tables, ignore_errors=True)
    if earlier is not None:
        earlier.close()
    if args.cold and history is not None:
        cold(history, injected, work, master, n, args)


def cold(history: Path, injected: dict[str, int], work: Path, master: str, n: int,
         args: argparse.Namespace) -> None:
    """args.runs whole checks as a user runs one: `python -m checkers`, a new process with its
    own ingest, Spark session and check (what a harness run's check pays); with --cold-before
    TREE the same command from that checkout too, alternating."""
    run_dir = work / "cold"
    run_dir.mkdir()
    try:
        os.link(history, run_dir / "history.jsonl")
    except OSError:  # another filesystem
        shutil.copyfile(history, run_dir / "history.jsonl")

    def command(tree: Path) -> Callable[[], Any]:
        env = {**os.environ, "PYTHONPATH": str(tree)}  # Spark's Python workers import it too
        argv = [sys.executable, "-m", "checkers", str(run_dir), "--spark-master", master]

        def once() -> dict[str, int]:
            done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tree,
                                  check=False)
            if done.returncode not in (0, 1):
                raise RuntimeError(f"python -m checkers in {tree}: exit {done.returncode}: "
                                   f"{done.stderr[-2000:]}")
            return json.loads(done.stdout.splitlines()[0])["anomalies"]

        return once

    before = args.cold_before and command(args.cold_before.resolve())
    out, times, out_before, times_before = _paired(args, command(REPO), before)
    stage("cold check: python -m checkers", times, n)
    if before:
        stage("cold check, BEFORE", times_before, n)
        print(f"{'after over before (medians)':38s} cold check "
              f"{statistics.median(times_before) / statistics.median(times):.2f}x")
    for name, found in [("cold", out), ("cold before", out_before)] if before else [("cold", out)]:
        missed = _missed(injected, found)
        print(f"anomalies ({name}) {found}" + (f"; MISSED {missed}" if missed else ""))
    shutil.rmtree(run_dir)


def _missed(injected: dict[str, int], found: dict[str, int]) -> dict[str, tuple[int, int]]:
    """The injected anomalies `found` does not count exactly: kind -> (injected, found)."""
    return {k: (v, found.get(k, 0)) for k, v in injected.items() if found.get(k, 0) != v}


def _pandas_apart(ops: Path, reads: Path) -> tuple[dict[str, int], float, float]:
    """The pandas reference in a process of its own (spawned: nothing of this one's memory):
    (its anomalies, its check's seconds, its peak MiB). At 10M operations it peaks at some
    15 GB, which on 24 GB beside this process's DuckDB and Spark's driver ran out of memory."""
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
        return pool.submit(_pandas_check, str(ops), str(reads)).result()


def _pandas_check(ops: str, reads: str) -> tuple[dict[str, int], float, float]:
    out, t = timed(reference.run, Path(ops), Path(reads), "all")
    return summary(out), t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


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
    ap.add_argument("--standalone", type=int, metavar="WORKERS",
                    help="start a standalone cluster of this many 1-core workers on 127.0.0.1")
    ap.add_argument("--worker-memory", default="6g", help="memory of each standalone worker")
    ap.add_argument("--executor-memory", default="5g", help="of each standalone executor")
    ap.add_argument("--driver-memory", default="4g")
    ap.add_argument("--workdir", type=Path, help="where to write histories (default: a temp dir)")
    ap.add_argument("--history", type=Path, help="check this history instead of generating")
    ap.add_argument("--tables", type=Path,
                    help="check these ops/reads Parquet tables (no ingest stage)")
    ap.add_argument("--injected", type=json.loads, default=None,
                    help="the anomalies injected into --history/--tables, as JSON")
    ap.add_argument("--exact-ingest", action="store_true",
                    help="also time the exact (line-by-line) ingest path once")
    ap.add_argument("--no-pandas", action="store_true", help="skip the pandas reference")
    ap.add_argument("--no-duckdb", action="store_true", help="skip the DuckDB baseline")
    ap.add_argument("--no-native", action="store_true",
                    help="skip histcheck alone (the native checks in this process, no Spark)")
    ap.add_argument("--spark-plan", choices=["auto", "native", "sql"], default="auto",
                    help="how Spark checks (spark_checks.run): native tasks, SQL plans, or "
                         "native when it fits in memory (auto)")
    ap.add_argument("--sql-too", action="store_true",
                    help="also time Spark's SQL plans (the path past memory)")
    ap.add_argument("--no-linearizability", action="store_true")
    ap.add_argument("--before-tools", type=Path, metavar="DIR",
                    help="an earlier build's histingest and histcheck, timed in the same run")
    ap.add_argument("--before-tables", type=Path, metavar="DIR",
                    help="with --tables: that build's tables of the same history")
    ap.add_argument("--cold", action="store_true",
                    help="also time whole checks as a user runs one (python -m checkers)")
    ap.add_argument("--cold-before", type=Path, metavar="TREE",
                    help="with --cold: the same command from that checkout too, alternating")
    args = ap.parse_args(argv)
    if (args.history or args.tables) and args.injected is None:
        ap.error("--history and --tables need --injected (the generator prints it)")
    if args.before_tools and args.tables and not args.before_tables:
        ap.error("--before-tools with --tables needs --before-tables (that build's tables)")
    if args.workdir and not args.workdir.is_dir():
        ap.error(f"--workdir {args.workdir}: not a directory")
    print(what_ran(), flush=True)
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=args.workdir)))
        master, workers = args.master, []
        if args.standalone:
            master, workers = stack.enter_context(
                standalone(args.standalone, args.worker_memory, tmp))
            os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # the driver binds to loopback too
            os.environ["PYSPARK_SUBMIT_ARGS"] = (
                f"--conf spark.executor.memory={args.executor_memory} pyspark-shell")
        spark, t = timed(get_session, master, driver_memory=args.driver_memory)
        print(f"session start, Spark {master}: {t:.1f} s (once; every check below reuses it)")
        if args.history or args.tables:
            bench(args.history, args.tables, args.injected, tmp, spark, workers, args)
        else:
            for size in [int(s.replace("_", "")) for s in args.sizes.split(",")]:
                hist = tmp / f"history-{size}.jsonl"
                g, t_gen = timed(generate, hist, size)
                print(f"\ngenerated {size:,} ops in {t_gen:.1f} s")
                bench(hist, None, g.injected, tmp, spark, workers, args)
                hist.unlink()
        spark.stop()
    if not args.no_linearizability:
        run_linearizability_bench()


if __name__ == "__main__":
    main()
