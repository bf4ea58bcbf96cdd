"""How much of their budget the Hypothesis state machines of tests/replication/test_protocol_stateful.py
spend on steps that do something.

A step is one rule execution (initialize rules are counted apart). It is *effective* when the
machine's observed state after the rule differs from the state before it. The observed state
is everything reachable from the machine instance -- the system under test (PartitionState,
Replica, Sim with its controller, brokers and logs) and the test's model (committed counts,
acked records, lossy brokers, ...) -- compared structurally, except Hypothesis's own
bookkeeping and fields that only hold the clock (`now`, timestamps, deadlines, the event
list): time passing alone is no change, a timer that fires is. A step that raises (a failure
found) counts as effective.

Each machine runs with its test's budget (max_examples, stateful_step_count) and generation
only (no shrinking, no database), once per seed; a must-fail twin runs until its first
failure, which must match its own message ("failed at run N" per seed). `runs` counts every
test case started, also those Hypothesis abandons when no enabled rule's precondition holds
(swarm testing disables a random subset of rules per test case); only completed ones count
toward max_examples. Compare two versions of the test file (to pin the replication code both
run against, put a copy of it first on PYTHONPATH; the header says which one was imported):

    .venv/bin/python benchmarks/hypothesis_steps.py --file /tmp/old_test_protocol_stateful.py
    .venv/bin/python benchmarks/hypothesis_steps.py [--seeds 0 1 2] [--machines MetadataMachine]
        [--per-rule]

Takes a few minutes for the default three seeds, most of it in the Sim machines.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import importlib.util
import re
import sys
import time
import traceback
import types
from collections import Counter, deque
from pathlib import Path

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FILE = ROOT / "tests" / "test_protocol_stateful.py"

# Budgets as the tests set them: (max_examples, stateful_step_count, twin's failure pattern).
MACHINES = {
    "MetadataMachine": (150, 40, None),
    "UnlimitedLossMachine": (100, 40, None),
    "NoElrMachine": (400, 40, r"incomplete leader elected|<="),
    "ReplicaMachine": (150, 40, None),
    "LocalFirstReplicaMachine": (200, 40, r"ack missing from a committed ISR member"),
    "SimMachine": (60, 30, None),
    "NoElrSimMachine": (200, 30, r"ack lost"),
}

CLOCK = frozenset({"now", "time", "timestamp_ms", "last_heartbeat", "next_heartbeat", "deadline",
                   "started", "last_caught_up", "caught_up_at", "fetch_backoff_until", "_flush_clock_ms",
                   "events"})
HYPOTHESIS = frozenset({"rules", "invariants", "bundles", "names_counters", "names_list",
                        "names_to_values", "_initialize_rules_to_run", "_rules_strategy",
                        "_observability_predicates", "_RuleBasedStateMachine__stream",
                        "_RuleBasedStateMachine__printer"})
SKIP = CLOCK | HYPOTHESIS
OPAQUE = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, type,
          types.ModuleType)


def freeze(x, path: frozenset = frozenset()):
    """A hashable, comparable structural copy of `x` without clock or Hypothesis fields."""
    if x is None or isinstance(x, (bool, int, float, str, bytes)):
        return x
    if isinstance(x, OPAQUE) or callable(x) and not hasattr(x, "__dict__"):
        return ("<opaque>", type(x).__name__)
    if id(x) in path:
        return ("<cycle>", type(x).__name__)
    path = path | {id(x)}
    if isinstance(x, dict):
        items = [(freeze(k, path), freeze(v, path)) for k, v in x.items() if k not in SKIP]
        return ("dict", tuple(sorted(items, key=lambda kv: repr(kv[0]))))
    if isinstance(x, (list, tuple, deque)):
        return (type(x).__name__, tuple(freeze(v, path) for v in x))
    if isinstance(x, (set, frozenset)):
        return ("set", tuple(sorted((freeze(v, path) for v in x), key=repr)))
    fields: dict = {}
    for klass in type(x).__mro__:
        for name in getattr(klass, "__slots__", ()):
            if hasattr(x, name):
                fields[name] = getattr(x, name)
    fields.update(getattr(x, "__dict__", {}))
    if not fields and not hasattr(x, "__dict__"):
        return ("<opaque>", type(x).__name__)
    return (type(x).__name__, tuple(sorted((k, freeze(v, path)) for k, v in fields.items()
                                           if k not in SKIP)))


@dataclasses.dataclass
class Stats:
    steps: Counter = dataclasses.field(default_factory=Counter)
    effective: Counter = dataclasses.field(default_factory=Counter)
    init_steps: int = 0
    runs: int = 0
    failures: list = dataclasses.field(default_factory=list)

    def record(self, rule: str, effective: bool) -> None:
        self.steps[rule] += 1
        self.effective[rule] += effective


def instrumented(cls: type[RuleBasedStateMachine], stats: Stats) -> type:
    """A subclass whose rules record, per call, whether the observed state changed."""

    class Instrumented(cls):  # type: ignore[valid-type, misc]
        def __init__(self) -> None:
            super().__init__()
            stats.runs += 1

    Instrumented.__name__ = Instrumented.__qualname__ = cls.__name__
    state = Instrumented.setup_state()

    def wrap(rule, initializer: bool):
        original, name = rule.function, rule.function.__name__

        def function(self, **kwargs):
            if initializer:
                stats.init_steps += 1
                return original(self, **kwargs)
            before = freeze(self)
            try:
                result = original(self, **kwargs)
            except BaseException:
                stats.record(name, True)
                raise
            stats.record(name, freeze(self) != before)
            return result

        function.__name__ = function.__qualname__ = name
        new = copy.copy(rule)
        new.function = function
        return new

    Instrumented._setup_state_per_class[Instrumented] = dataclasses.replace(
        state, rules=[wrap(r, False) for r in state.rules],
        initializers=[wrap(r, True) for r in state.initializers])
    return Instrumented


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"stateful_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure(module, name: str, seeds: list[int]) -> tuple[Stats, float]:
    max_examples, step_count, twin = MACHINES[name]
    stats = Stats()
    t0 = time.perf_counter()
    for seed in seeds:
        runs_before = stats.runs
        machine = instrumented(getattr(module, name), stats)
        machine._hypothesis_internal_use_seed = seed
        try:
            run_state_machine_as_test(machine, settings=settings(
                max_examples=max_examples, stateful_step_count=step_count, deadline=None,
                database=None, phases=[Phase.generate], verbosity=Verbosity.quiet,
                suppress_health_check=list(HealthCheck)))
        except AssertionError as err:
            # Under pytest the message also holds the assert statement (assertion rewriting).
            message = f"{err}\n{traceback.extract_tb(err.__traceback__)[-1].line}"
            if twin is None:
                raise
            runs = stats.runs - runs_before
            # A twin must fail for its own reason; another failure is reported as such.
            stats.failures.append((seed, runs if re.search(twin, message) else f"{runs}:OTHER"))
        else:
            if twin is not None:
                stats.failures.append((seed, None))  # a twin that missed its failure
    return stats, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--machines", nargs="+", default=list(MACHINES))
    parser.add_argument("--per-rule", action="store_true", help="also print each rule's share")
    args = parser.parse_args()
    module = load(args.file)
    print(f"{args.file} against {Path(sys.modules['replication'].__file__).parent}"
          f"  seeds {args.seeds}")
    print(f"{'machine':26} {'runs':>5} {'init':>5} {'steps':>6} {'effective':>9} {'share':>6}"
          f" {'seconds':>7}  twin")
    for name in args.machines:
        stats, seconds = measure(module, name, args.seeds)
        steps, effective = sum(stats.steps.values()), sum(stats.effective.values())
        twin = ""
        if MACHINES[name][2] is not None:
            twin = "failed at run " + ", ".join(
                "NONE" if runs is None else str(runs) for _, runs in stats.failures)
            twin += " (per seed; OTHER: not its own failure, NONE: no failure)"
        print(f"{name:26} {stats.runs:5} {stats.init_steps:5} {steps:6} {effective:9}"
              f" {effective / max(steps, 1):6.1%} {seconds:7.1f}  {twin}", flush=True)
        if args.per_rule:
            for rule, n in sorted(stats.steps.items()):
                print(f"    {rule:26} {n:6} {stats.effective[rule]:6}"
                      f" {stats.effective[rule] / n:6.1%}")


if __name__ == "__main__":
    main()
