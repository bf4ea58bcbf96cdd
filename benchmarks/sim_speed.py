"""How fast the simulated world runs the validation campaign's configuration.

    .venv/bin/python benchmarks/sim_speed.py [--config safe] [--runs 3] [--faults none|tour]
                                             [--time-limit S] [--profile N] [--invariants on|off]

The configuration is read from campaigns/validation.toml and the profiles it builds on
(harness/profiles/default.toml, then its `base`, then its [set], then the named [[config]]'s
set), exactly the keys a real run of that campaign uses: nodes, topic partitions and
replication factor, the workload (acks, rate, producers, consumers, request timeout, final
read timeout), the [system] node config and the time limit. Each run is a whole simulated
test (start, topic creation, workload, heal, final read) into a temporary folder.

Prints, per run and as the best of the runs: simulated seconds per wall second and per CPU
second of this process, and runs per hour (one run: its wall time). `--faults tour` adds one
fault of each kind in turn (simulation.scenarios.tour) in place of the campaign's randomised
nemesis schedule. `--profile N` profiles one more run with cProfile and prints the N
functions with the most own time, then the own time per source file. `--pingpong N`
first times N request/answer round trips through the simulated network alone (an echo
process, the callback form the nodes use): the simulator's own cost per message.
`--invariants off` runs without the protocol invariants checked after every step
(simulation/invariants.py; on by default, as run_simulation has it): the two side by side
measure the checking's cost. No assertions.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import pstats
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulation.loop import SimLoop  # noqa: E402
from simulation.network import ClientProcess, Network, Pool, Process  # noqa: E402
from simulation.run import run_simulation  # noqa: E402
from simulation.scenarios import tour  # noqa: E402
from workloads.kafka import WorkloadParams  # noqa: E402


def _flat(table: dict) -> dict[str, Any]:
    """{"topic": {"partitions": 1}} -> {"topic.partitions": 1}; top-level scalars stay."""
    out: dict[str, Any] = {}
    for k, v in table.items():
        if isinstance(v, dict):
            out.update({f"{k}.{kk}": vv for kk, vv in _flat_system(v).items()})
        else:
            out[k] = v
    return out


def _flat_system(table: dict, prefix: str = "") -> dict[str, Any]:
    """Kafka names contain dots: TOML may have read them as nested tables."""
    out: dict[str, Any] = {}
    for k, v in table.items():
        if isinstance(v, dict):
            out.update(_flat_system(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def validation_config(name: str = "safe") -> dict[str, Any]:
    """The flat settings ("topic.partitions", "system.min.insync.replicas", ...) of one
    [[config]] of campaigns/validation.toml."""
    campaign = tomllib.loads((ROOT / "campaigns" / "validation.toml").read_text())
    profiles = ROOT / "harness" / "profiles"
    settings = _flat(tomllib.loads((profiles / "default.toml").read_text()))
    base = campaign.get("base")
    if base:
        settings.update(_flat(tomllib.loads((profiles / f"{base}.toml").read_text())))
    settings["time_limit"] = campaign.get("time_limit", settings.get("time_limit"))
    settings.update(_flat_system(campaign.get("set", {})))
    configs = {c["name"]: c for c in campaign.get("config", [])}
    if name not in configs:
        raise SystemExit(f"no [[config]] named {name!r} in validation.toml: {sorted(configs)}")
    settings.update(_flat_system(configs[name].get("set", {})))
    settings["seeds"] = campaign.get("seeds", [1])
    return settings


def one_run(settings: dict[str, Any], seed: int, faults: str, time_limit: float | None,
            invariants: bool = True) -> Any:
    system = {k[len("system."):]: v for k, v in settings.items() if k.startswith("system.")}
    params = WorkloadParams(
        topic=settings["topic.name"], partitions=int(settings["topic.partitions"]),
        acks=str(settings["workload.acks"]), rate=float(settings["workload.rate"]),
        producers=int(settings["workload.producers"]), consumers=int(settings["workload.consumers"]),
        request_timeout_s=float(settings["workload.request_timeout_ms"]) / 1000, seed=seed)
    with tempfile.TemporaryDirectory() as tmp:
        cpu = time.process_time()
        result = run_simulation(
            Path(tmp) / "run", seed=seed, params=params,
            time_limit=float(time_limit or settings["time_limit"]), system=system,
            n_nodes=int(settings["nodes"]), replication_factor=int(settings["topic.replication_factor"]),
            final_read_timeout=float(settings["workload.final_read_timeout"]),
            faults=tour(settings["topic.name"]) if faults == "tour" else None,
            invariants=invariants)
        result.cpu_s = time.process_time() - cpu
    return result


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="safe", help="a [[config]] of campaigns/validation.toml")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--faults", choices=("none", "tour"), default="none")
    ap.add_argument("--time-limit", type=float, default=None, help="override the campaign's")
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    ap.add_argument("--pingpong", type=int, default=0, metavar="N")
    ap.add_argument("--invariants", choices=("on", "off"), default="on",
                    help="check the protocol invariants after every step (default on)")
    args = ap.parse_args()
    if args.pingpong:
        print(f"simulated network alone: {pingpong(args.pingpong):.2f} us CPU per request/answer "
              "round trip (2 messages, a timeout timer, 2 loop events)")
    settings = validation_config(args.config)
    shown = {k: settings[k] for k in ("nodes", "topic.partitions", "topic.replication_factor",
                                      "workload.acks", "workload.rate", "workload.producers",
                                      "workload.consumers", "time_limit")}
    print(f"validation.toml [[config]] {args.config!r}: {shown}")
    print(f"system: { {k[7:]: v for k, v in settings.items() if k.startswith('system.')} }")
    best = None
    for i in range(args.runs):
        seed = settings["seeds"][i % len(settings["seeds"])]
        r = one_run(settings, seed, args.faults, args.time_limit, args.invariants == "on")
        print(f"run {i + 1} (seed {seed}): {r.virtual_s:6.1f} simulated s in {r.wall_s:6.2f} s wall "
              f"({r.virtual_s / r.wall_s:5.1f}x), {r.cpu_s:6.2f} s CPU ({r.virtual_s / r.cpu_s:5.1f}x); "
              f"{r.stats['send-ok']} acked sends, {r.net['messages']} messages; "
              f"{3600 / r.wall_s:7.0f} runs/hour")
        if best is None or r.wall_s < best.wall_s:
            best = r
    if best is not None:
        print(f"best: {best.virtual_s / best.wall_s:.1f} simulated s per wall s, "
              f"{best.virtual_s / best.cpu_s:.1f} per CPU s, {3600 / best.wall_s:.0f} runs/hour "
              f"(one run: {best.wall_s:.2f} s wall for {best.virtual_s:.1f} simulated s)")
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        one_run(settings, settings["seeds"][0], args.faults, args.time_limit, args.invariants == "on")
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
