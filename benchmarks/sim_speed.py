"""How fast the simulated world runs the validation campaign's configuration.

    .venv/bin/python benchmarks/sim_speed.py [--config safe|all] [--faults none|campaign|tour]
        [--runs 3] [--check] [--real RESULTS...] [--profile N] [--pingpong N] [--invariants on|off]
        [--interpreter cpython|pypy] [--warmup N]

The test is a cell of campaigns/validation.toml (`--campaign` for another file), resolved as
`harness simulate --campaign FILE --cell NAME` resolves it: nodes, topic, the workload (acks,
rate, producers, consumers, timeouts), the [system] node config and the time limit. Each run is
a whole simulated test (start, topic creation, workload, heal, final read) into a temporary
folder, through harness.simulate.simulate_into as a search runs it.

`--faults none` (the default) runs without a nemesis: full throughput all the time, the most
work per simulated second. `--faults campaign` runs the cell's own nemesis mix, as searches and
the soak do. `--faults tour` runs one fault of each kind in turn (support.scenarios.tour).

Prints per run and as medians: simulated seconds per wall second (also over all the runs
together) and per CPU second of this process, and runs per hour. `--check` also checks each
run as a search checks each seed (histcheck over the ingested history, or the pandas
reference where it is not built) and prints search runs per hour per core.
`--config all` runs every [[config]] of the campaign and prints one line each.
`--real RESULTS...` reads real-host runs of the same config from campaign results folders
(`harness campaign` output) and prints their wall time per run and runs per hour beside the
simulator's. `--profile N` profiles one more run with cProfile and prints the N functions with
the most own time, then the own time per source file. `--pingpong N` first times N
request/answer round trips through the simulated network alone. `--invariants off` runs without
the protocol invariants checked after every step (on by default): the two side by side measure
the checking's cost. `--interpreter pypy` simulates in one PyPy child (harness/pypy.py, as a
search's worker does) that lives through all the runs, so its JIT warms up; `--warmup N` first
runs N seeds that are printed but left out of the medians (a long search's steady state). The
check and the profile stay in this process. No assertions.

It first prints what ran it: the interpreter (its version and the executable the venv was made
from: a CPython built without profile-guided optimisation runs the simulator at about 0.75x,
docs/simulation.md, "The interpreter"), the CPU and the load average, so that figures of
different days and machines can be told apart.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import io
import json
import pstats
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/support: scaffolding

from support.machine import what_ran  # noqa: E402
from support.scenarios import tour  # noqa: E402

from checkers.check import check_path  # noqa: E402
from harness import store  # noqa: E402
from harness.campaign_spec import load_spec  # noqa: E402
from harness.config import typed  # noqa: E402
from harness.pypy import PypySimulator  # noqa: E402
from harness.pypy import binary as pypy_binary  # noqa: E402
from harness.sim_run import as_simulated, simulate_into, with_seed  # noqa: E402
from harness.test import Test  # noqa: E402
from simulation.loop import SimLoop  # noqa: E402
from simulation.network import ClientProcess, Network, Pool, Process  # noqa: E402
from simulation.run import run_simulation  # noqa: E402
from workloads.kafka import WorkloadParams  # noqa: E402

VALIDATION = ROOT / "campaigns" / "validation.toml"


def cell_config(campaign: Path, name: str, faults: str) -> dict[str, Any]:
    """The resolved test config of `name`'s first cell in `campaign` (as `harness simulate
    --campaign FILE --cell NAME` takes it), with its nemesis mix or, for faults "none" and
    "tour", no nemesis schedule."""
    _, cells = load_spec(campaign)
    for cell in cells:
        if cell.config == name:
            config = as_simulated(cell.resolved)
            if faults != "campaign":
                config["nemesis"]["faults"] = []
            return config
    raise SystemExit(f"no [[config]] named {name!r} in {campaign}: "
                     f"{sorted({c.config for c in cells})}")


def seeds_of(campaign: Path) -> list[int]:
    _, cells = load_spec(campaign)
    return sorted({c.seed for c in cells})


_PYPY: PypySimulator | None = None  # --interpreter pypy: one child for every run


def one_run(config: dict[str, Any], seed: int, faults: str, invariants: bool = True,
            check: bool = False) -> Any:
    """One whole simulated test of `config` at `seed` into a temporary folder (the nemesis of
    the config, or `tour`), optionally checked as a search checks each seed; the SimResult (or,
    under PyPy, what the child reports) with `cpu_s` and `check_s` added."""
    seeded = with_seed(typed(config), seed)
    test = Test.of(seeded, Path("/nonexistent"), check=False)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cpu = time.process_time()
        if _PYPY is not None:
            # cpu_s is the child's own CPU time
            result = SimpleNamespace(**_PYPY.simulate(seeded, folder,
                                                      invariants=invariants))
        elif faults == "tour":
            s = test.config
            result = run_simulation(
                folder, seed=seed, params=WorkloadParams(
                    topic=s.topic.name, partitions=s.topic.partitions, acks=s.workload.acks,
                    rate=s.workload.rate, producers=s.workload.producers,
                    consumers=s.workload.consumers,
                    request_timeout_s=s.workload.request_timeout_ms / 1000, seed=seed),
                time_limit=s.time_limit, system=dict(s.node_settings), n_nodes=s.nodes,
                replication_factor=s.topic.replication_factor,
                final_read_timeout=s.workload.final_read_timeout, faults=tour(s.topic.name, folder),
                invariants=invariants)
        else:
            result = simulate_into(test, folder, keep_going=True, invariants=invariants)
        if _PYPY is None:
            result.cpu_s = time.process_time() - cpu
        result.check_s = 0.0
        if check:
            store.write_test_json(folder, test.config, ["harness", "simulate"], 0.0)
            started = time.perf_counter()
            with contextlib.redirect_stderr(io.StringIO()):  # the checker's stage lines
                check_path(folder, backend="native")
            result.check_s = time.perf_counter() - started
    return result


def real_runs(folders: list[Path], name: str) -> list[tuple[float, float]]:
    """(wall seconds, run seconds) of each real-host run of config `name` under `folders`
    (campaign results folders): wall from test.json's started_at to results.json (setup,
    workload, final read, check and report), run seconds from the history's first to its
    last line."""
    out = []
    for folder in folders:
        for test_json in sorted(folder.glob(f"*-{name}-*/*/test.json")):
            run = test_json.parent
            results = run / "results.json"
            record = json.loads(test_json.read_text())
            if not results.exists() or record.get("hosts") == "sim":
                continue
            wall = results.stat().st_mtime - float(record["started_at"])
            out.append((wall, _history_span_s(run / "history.jsonl")))
    return out


def _history_span_s(history: Path) -> float:
    """Seconds between the first and the last line's `time` (read from both ends: a final
    poll's line can be megabytes long, and its `time` comes first)."""
    with open(history, "rb") as f:
        first = f.readline(200)
        end = f.seek(0, 2)
        f.seek(max(0, end - (1 << 20)))
        tail = f.read().rstrip(b"\n").rsplit(b"\n", 1)[-1]
    stamps = [re.match(rb'\{"index": \d+, "time": (\d+)', line) for line in (first, tail)]
    if not all(stamps):
        return float("nan")
    return (int(stamps[1].group(1)) - int(stamps[0].group(1))) / 1e9


def pingpong(n: int) -> float:
    """CPU microseconds per round trip through the simulated network, nothing else."""
    import random

    loop = SimLoop()
    net = Network(loop, random.Random(1), ["n1", "n2"])

    class Echo(Process):
        def call_later(self, delay, fn, *args):  # noqa: ANN001
            return loop.call_later(delay, fn, *args)

        def on_request(self, stream, rid, msg) -> None:  # noqa: ANN001
            net.reply(stream, rid, msg)

    net.listen(Echo("n2"))
    conn = Pool(net, ClientProcess(loop, "n1")).get("n2:9092")
    out: dict[str, float] = {}

    async def run() -> None:
        await conn.request({}, 1.0)
        done = loop.create_future()
        count = [0]

        def answered(_reply: object) -> None:
            count[0] += 1
            if count[0] < n:
                conn.call({"type": "ping"}, 1.0, answered)
            else:
                done.set_result(None)

        cpu = time.process_time()
        conn.call({"type": "ping"}, 1.0, answered)
        await done
        out["us"] = (time.process_time() - cpu) / n * 1e6

    loop.run(run())
    return out["us"]


def describe(config: dict[str, Any]) -> str:
    w = config["workload"]
    return (f"{config['nodes']} nodes, {config['topic']['partitions']} partition(s), RF "
            f"{config['topic']['replication_factor']}, acks={w['acks']}, {w['producers']} producers "
            f"at {w['rate']} records/s, {w['consumers']} consumers, {config['time_limit']} s, "
            f"nemesis {config['nemesis']['faults'] or 'none'}")


def measure(config: dict[str, Any], seeds: list[int], args: argparse.Namespace) -> list[Any]:
    runs = []
    for i in range(args.warmup + args.runs):
        seed = seeds[i % len(seeds)]
        r = one_run(config, seed, args.faults, args.invariants == "on", args.check)
        if i >= args.warmup:
            runs.append(r)
        checked = (f"; check {r.check_s:5.2f} s, {3600 / (r.wall_s + r.check_s):6.0f} search runs/hour"
                   if args.check else "")
        label = f"warm-up {i + 1}" if i < args.warmup else f"run {i + 1 - args.warmup}"
        print(f"  {label} (seed {seed}): {r.virtual_s:6.1f} simulated s in {r.wall_s:6.2f} s wall "
              f"({r.virtual_s / r.wall_s:5.1f}x), {r.cpu_s:6.2f} s CPU ({r.virtual_s / r.cpu_s:5.1f}x); "
              f"{r.stats.get('send-ok', 0)} acked sends, {r.net['messages']} messages{checked}",
              flush=True)
    return runs


def summary(name: str, runs: list[Any], check: bool) -> str:
    wall = statistics.median(r.virtual_s / r.wall_s for r in runs)
    worst = min(r.virtual_s / r.wall_s for r in runs)
    cpu = statistics.median(r.virtual_s / r.cpu_s for r in runs)
    per_run = statistics.median(r.wall_s for r in runs)
    # All the runs together: what a long search gets, slow runs (a major collection) included.
    overall = sum(r.virtual_s for r in runs) / sum(r.wall_s for r in runs)
    line = (f"{name}: median {wall:.1f} simulated s per wall s (worst {worst:.1f}, all runs "
            f"together {overall:.1f}), {cpu:.1f} per CPU s, {3600 / per_run:.0f} runs/hour "
            f"(median run {per_run:.2f} s wall)")
    if check:
        search = statistics.median(r.wall_s + r.check_s for r in runs)
        line += f"; with the per-seed check {3600 / search:.0f} runs/hour per core"
    return line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--campaign", type=Path, default=VALIDATION)
    ap.add_argument("--config", default="safe", help="a [[config]] of the campaign, or 'all'")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--faults", choices=("none", "campaign", "tour"), default="none")
    ap.add_argument("--check", action="store_true", help="also time each run's check")
    ap.add_argument("--real", type=Path, nargs="+", default=[], metavar="RESULTS",
                    help="campaign results folders with real-host runs of the same configs")
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    ap.add_argument("--pingpong", type=int, default=0, metavar="N")
    ap.add_argument("--invariants", choices=("on", "off"), default="on",
                    help="check the protocol invariants after every step (default on)")
    ap.add_argument("--interpreter", choices=("cpython", "pypy"), default="cpython",
                    help="what simulates: this process, or one warm PyPy child (harness/pypy.py)")
    ap.add_argument("--warmup", type=int, default=0, metavar="N",
                    help="first run N seeds left out of the medians")
    args = ap.parse_args()
    global _PYPY
    if args.interpreter == "pypy":
        python = pypy_binary()
        if python is None:
            raise SystemExit("--interpreter pypy: no PyPy installed (make bootstrap installs it)")
        if args.faults == "tour" or args.profile or args.pingpong:
            raise SystemExit("--interpreter pypy runs whole configured tests only (not --faults "
                             "tour, --profile or --pingpong)")
        _PYPY = PypySimulator(python)
    print(what_ran(f"PyPy child ({_PYPY.python})" if _PYPY else None), flush=True)
    if args.pingpong:
        print(f"simulated network alone: {pingpong(args.pingpong):.2f} us CPU per request/answer "
              "round trip (2 messages, a timeout timer, 2 loop events)")
    names = [args.config]
    if args.config == "all":
        names = sorted({c.config for c in load_spec(args.campaign)[1]})
    seeds = seeds_of(args.campaign)
    lines = []
    for name in names:
        config = cell_config(args.campaign, name, args.faults)
        print(f"{args.campaign.name} [[config]] {name!r}: {describe(config)}")
        runs = measure(config, seeds, args)
        lines.append(summary(name, runs, args.check))
        real = real_runs(args.real, name)
        if real:
            wall = statistics.median(w for w, _ in real)
            span = statistics.median(s for _, s in real)
            sim = statistics.median(r.wall_s + r.check_s for r in runs)
            lines.append(f"{name} on real hosts: {len(real)} runs, median {wall:.0f} s wall per run "
                         f"({span:.0f} s of history), {3600 / wall:.0f} runs/hour; the simulator "
                         f"{'with its check ' if args.check else ''}{wall / sim:.0f}x as many")
    print()
    for line in lines:
        print(line)
    if args.profile:
        config = cell_config(args.campaign, names[0], args.faults)
        prof = cProfile.Profile()
        prof.enable()
        one_run(config, seeds[0], args.faults, args.invariants == "on", args.check)
        prof.disable()
        stats = pstats.Stats(prof)
        stats.sort_stats("tottime").print_stats(args.profile)
        by_file: collections.Counter = collections.Counter()
        for (path, _line, _name), (_cc, _nc, tt, _ct, _callers) in stats.stats.items():
            parts = Path(path).parts
            by_file["/".join(parts[-2:]) if len(parts) > 1 else path] += tt
        total = sum(by_file.values())
        print("own time by file (profiled):")
        for path, tt in by_file.most_common(20):
            print(f"  {tt:7.3f} s {100 * tt / total:5.1f} %  {path}")


if __name__ == "__main__":
    main()
