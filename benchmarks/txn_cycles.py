"""Cycle search speed on transactional histories (checkers/txn), side by side with a
single-process baseline that searches without components first.

Generates a history of N transactions (Jepsen `:txn` ops) in memory: clients run one
transaction at a time; each takes effect at one instant between its invoke and its
completion, in a serial order, so sends land in that order and polls return what was
committed before (each client tails every key it polls). Such a history has no cycle; two
more transactions that read each other's sends on two fresh keys plant exactly one G1c.

For each size it times, in this one process: building the version orders and the
dependency graph, our search (strongly connected components, then a cycle in each, for all
six cycle classes), and the baseline: for G1c alone, a breadth-first search back from every
wr edge over the whole graph (what a search without components does), stopped at
`--baseline-budget-s`. Both must find the planted cycle. Run it with PyPy as well
(`.venv/bin/pypy-sim`, harness/pypy.py) to compare interpreters.

`--before REV` times instead, on the same histories in this one process, the graph and the
search of checkers/txn as they were at git revision REV (graph.py and analysis.py read with
`git show`, imported as a package of their own) beside today's, one after the other for each
size, in CPU seconds: both must find the planted cycle alone.

    .venv/bin/python benchmarks/txn_cycles.py --sizes 10000,100000,1000000
    .venv/bin/pypy-sim benchmarks/txn_cycles.py --sizes 1000000
    .venv/bin/python benchmarks/txn_cycles.py --sizes 100000,1000000 --before 7b6e1b0
"""

from __future__ import annotations

import argparse
import gc
import importlib
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from checkers.txn import analysis  # noqa: E402
from checkers.txn.analysis import Dependencies, Findings, Orders, find_cycles  # noqa: E402
from checkers.txn.graph import WR, WW  # noqa: E402
from checkers.txn.ops import Poll, Send, Txn  # noqa: E402

SPACING, LATENCY = 10, 40  # between effects; the most a transaction takes before/after it


class _World:
    def __init__(self, keys: int, clients: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.logs: list[list[int]] = [[] for _ in range(keys)]
        self.free_at = [0] * clients
        self.position = [[0] * keys for _ in range(clients)]
        self.value = 0

    def send(self, k: int, mop: int) -> Send:
        self.value += 1
        self.logs[k].append(self.value)
        return Send(mop, k, self.value, len(self.logs[k]) - 1)

    def poll(self, client: int, k: int, mop: int) -> Poll:
        start = self.position[client][k]
        end = min(len(self.logs[k]), start + self.rng.randint(1, 5))
        self.position[client][k] = end
        return Poll(mop, k, [(o, self.logs[k][o]) for o in range(start, end)], str(client))


def generate(n: int, keys: int, clients: int, seed: int) -> list[Txn]:
    """n acyclic transactions, then the two of the planted G1c (keys `keys` and `keys`+1)."""
    w = _World(keys, clients, seed)
    rng = w.rng
    txns = []
    effect = 0
    while len(txns) < n:
        effect += SPACING
        idle = [c for c, t in enumerate(w.free_at) if t < effect]
        if not idle:
            continue
        c = rng.choice(idle)
        invoke = max(w.free_at[c] + 1, effect - rng.randint(0, LATENCY))
        t = Txn(len(txns), str(c), "ok", invoke, effect + rng.randint(0, LATENCY))
        w.free_at[c] = t.complete
        kind = rng.random()
        if kind < 0.8:
            t.sends = [w.send(rng.randrange(keys), i) for i in range(rng.randint(1, 3))]
        if kind >= 0.5:
            t.polls = [w.poll(c, rng.randrange(keys), len(t.sends) + i)
                       for i in range(rng.randint(1, 2))]
        txns.append(t)
    end = effect + 1000
    a, b = keys, keys + 1
    txns.append(Txn(n, "planted-1", "ok", end, end + 10, [Send(0, a, -1, 0)],
                    [Poll(1, b, [(0, -2)], "planted-1")]))
    txns.append(Txn(n + 1, "planted-2", "ok", end + 1, end + 11, [Send(0, b, -2, 0)],
                    [Poll(1, a, [(0, -1)], "planted-2")]))
    return txns


def baseline_g1c(deps: Dependencies, budget_s: float) -> tuple[int, int, int, bool]:
    """Breadth-first search from the head of every wr edge back to its tail, over ww and wr
    edges of the whole graph: (cycles found, edges tried, wr edges, finished)."""
    succ = deps.g.succ
    wr_edges = [(a, b) for a, out in enumerate(succ) for b, kind in out.items()
                if kind & WR and not kind & WW]
    deadline = time.monotonic() + budget_s
    found = tried = 0
    for a, b in wr_edges:
        if time.monotonic() > deadline:
            return found, tried, len(wr_edges), False
        tried += 1
        seen = {b}
        queue = deque([b])
        while queue:
            v = queue.popleft()
            if v == a:
                found += 1
                break
            for x, kind in succ[v].items():
                if kind & (WW | WR) and x not in seen:
                    seen.add(x)
                    queue.append(x)
    return found, tried, len(wr_edges), True


def measure(n: int, keys: int, clients: int, seed: int, budget_s: float) -> dict:
    txns = generate(n, keys, clients, seed)
    gc.collect()
    t0 = time.perf_counter()
    orders = Orders(txns)
    deps = Dependencies(txns, orders, ww=True)  # the larger graph: ww edges too (:ww-deps)
    t1 = time.perf_counter()
    findings = Findings()
    find_cycles(deps, findings, time.monotonic() + 3600)
    t2 = time.perf_counter()
    found, tried, wr_edges, finished = baseline_g1c(deps, budget_s)
    t3 = time.perf_counter()
    ours = {name: count for name, (count, _) in findings.found.items()}
    assert ours == {"G1c": 1}, ours
    assert found >= 1 or not finished, "the baseline missed the planted cycle"
    return {"n": n, "edges": deps.g.edges(), "graph_s": t1 - t0, "ours_s": t2 - t1,
            "baseline_s": t3 - t2, "baseline": f"{tried:,}/{wr_edges:,} wr edges" + (
                "" if finished else " (stopped)"), "baseline_found": found}


def load_before(rev: str) -> ModuleType:
    """checkers/txn/analysis.py as it was at git revision `rev`, with the graph.py of that
    revision: both written to a temporary package `txn_before`, the analysis's import of the
    graph pointed there (the other modules it imports are today's)."""
    folder = Path(tempfile.mkdtemp(prefix="txn-before-")) / "txn_before"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    for name in ("graph", "analysis"):
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:checkers/txn/{name}.py"],
                              capture_output=True, text=True, check=True).stdout
        text = text.replace("from checkers.txn.graph import", "from txn_before.graph import")
        (folder / f"{name}.py").write_text(text)
    sys.path.insert(0, str(folder.parent))
    return importlib.import_module("txn_before.analysis")


def timed(module: ModuleType, txns: list[Txn]) -> tuple[float, float, int]:
    """(build s, search s, edges) of one implementation on `txns`, in CPU seconds of this
    process (the work is one thread's: on a shared machine its wall time is mostly the
    other processes' load); it must find the planted G1c and nothing else."""
    gc.collect()
    t0 = time.process_time()
    deps = module.Dependencies(txns, module.Orders(txns), ww=True)
    t1 = time.process_time()
    findings = module.Findings()
    module.find_cycles(deps, findings, time.monotonic() + 3600)
    t2 = time.process_time()
    ours = {name: count for name, (count, _) in findings.found.items()}
    assert ours == {"G1c": 1}, ours
    return t1 - t0, t2 - t1, deps.g.edges()


def compare(sizes: list[int], rev: str, keys: int, clients: int, seed: int,
            repeat: int) -> None:
    before = load_before(rev)
    # the fastest of `repeat` tries each, alternating: a shared machine's load only adds time
    print(f"before: checkers/txn at {rev}; after: the working tree; CPU seconds, best of "
          f"{repeat}, alternating")
    print("| transactions | graph edges | build before | build after | build ratio | search "
          "before | search after | search ratio | total ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in sizes:
        txns = generate(n, keys, clients, seed)
        pairs = [(timed(before, txns), timed(analysis, txns)) for _ in range(repeat)]
        b_build, b_search = (min(p[0][i] for p in pairs) for i in (0, 1))
        a_build, a_search = (min(p[1][i] for p in pairs) for i in (0, 1))
        edges, a_edges = pairs[0][0][2], pairs[0][1][2]
        assert edges == a_edges, (edges, a_edges)
        print(f"| {n:,} | {edges:,} | {b_build:.1f} s | {a_build:.1f} s | "
              f"{b_build / a_build:.1f}x | {b_search:.2f} s | {a_search:.2f} s | "
              f"{b_search / a_search:.0f}x | {(b_build + b_search) / (a_build + a_search):.1f}x |",
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--baseline-budget-s", type=float, default=300.0)
    ap.add_argument("--before", metavar="REV", help="time checkers/txn at git revision REV "
                    "beside today's instead of the baseline")
    ap.add_argument("--repeat", type=int, default=1, help="with --before: tries of each, "
                    "alternating; the fastest is shown")
    args = ap.parse_args()
    print(f"{platform.python_implementation()} {platform.python_version()}, "
          f"keys={args.keys}, clients={args.clients}, seed={args.seed}")
    if args.before:
        compare([int(s) for s in args.sizes.split(",")], args.before, args.keys,
                args.clients, args.seed, args.repeat)
        print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB")
        return
    print("| transactions | graph edges | build graph | ours: SCCs + cycles | baseline: BFS per "
          "wr edge | baseline tried | ratio |")
    print("|---|---|---|---|---|---|---|")
    for n in (int(s) for s in args.sizes.split(",")):
        r = measure(n, args.keys, args.clients, args.seed, args.baseline_budget_s)
        ratio = r["baseline_s"] / r["ours_s"] if r["ours_s"] else float("inf")
        at_least = ">= " if "stopped" in r["baseline"] else ""  # the baseline did not finish
        print(f"| {r['n']:,} | {r['edges']:,} | {r['graph_s']:.1f} s | {r['ours_s']:.2f} s | "
              f"{r['baseline_s']:.1f} s | {r['baseline']} | {at_least}{ratio:,.0f}x |",
              flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:,.0f} MiB")


if __name__ == "__main__":
    main()
