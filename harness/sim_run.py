"""One simulated run: a test's config into the simulated world (simulation/), written to a run
folder's history.jsonl, events.jsonl and schedule.json.

Kept apart from harness/simulate.py (searches, checks, reports) so that its imports stay
within the simulation's own closure: harness/sim_worker.py runs it under PyPy, which has none
of the checkers' or the report's libraries (harness/pypy.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from checkers.exitcodes import UserError
from harness.config import TestConfig, typed
from harness.test import Test
from nemesis.faults import Nemesis, metadata_topology
from nemesis.kinds import lookup
from nemesis.schedule import ScheduleRecord
from simulation.run import FaultScript, SimResult, run_simulation
from simulation.world import Verbs, World

SIM = "sim"


def simulated(config: TestConfig) -> TestConfig:
    """The config with hosts.provider = "sim" (keeping hosts.startup_s, the simulated hosts'
    start-up delay); refuses fault kinds the simulator cannot apply."""
    if config.system_kind != "embedded":
        raise UserError("the simulator runs the embedded system, not system.kind = "
                        f"{config.system_kind!r}: run Kafka on hosts with `harness run`")
    unsupported = [f for f in config.nemesis.faults if not lookup(f).simulated]
    if unsupported:
        raise UserError(f"the simulated world cannot apply {', '.join(unsupported)} "
                        "(real hosts only); remove it from nemesis.faults or use `harness run`")
    startup = config.hosts.startup_s
    hosts = {"provider": SIM} | ({} if startup is None else {"startup_s": list(startup)})
    return typed({**config.record(), "hosts": hosts})


def as_simulated(config: Mapping[str, Any]) -> dict[str, Any]:
    """simulated() of a validated config dict, as a dict: for the editors of a config that is
    still a file's or a command line's (harness.system_spec, harness reproduce), before it is
    typed. A run, a search and their workers take simulated(TestConfig)."""
    return simulated(typed(config)).record()


def with_seed(config: TestConfig, seed: int) -> TestConfig:
    return replace(config, seed=seed)


def controller_view(world: World, topic: str) -> Callable[[int], Awaitable[dict | None]]:
    """A partition's state as the controller last recorded it in its metadata log, read
    straight off the simulated disk: no message, so the run is the same with or without it."""

    async def state(partition: int) -> dict | None:
        for record in reversed(world.disks[world.controller].metadata_records()):
            s = record.get("state") if record.get("type") == "partition" else None
            if s is not None and (s["topic"], s["partition"]) == (topic, partition):
                return s
        return None

    return state


def nemesis_faults(schedule: ScheduleRecord, topic: str,
                   settings: Mapping[str, Any]) -> FaultScript:
    """The nemesis carrying `schedule` out in the world, its time axis starting with the
    workload: a simulated run's faults (`run_simulation(faults=)`), as on real hosts."""

    def faults(world: World, loop) -> Any:
        started = loop.time()  # the workload starts now: the schedule's time axis
        topology = replace(metadata_topology(world.nodes, world.bootstrap(), topic,
                                             pool_factory=world.pool),
                           oracle=controller_view(world, topic))
        nemesis = Nemesis(Verbs(world), topology, world.history, schedule,
                          lambda: loop.time() - started, settings)
        return nemesis.run()

    return faults


def simulate_into(test: Test, out_dir: Path, *, keep_going: bool = False,
                  invariants: bool = True) -> SimResult:
    """Simulate `test` into `out_dir`: history.jsonl, events.jsonl, schedule.json.
    `keep_going`: an invariant violation is recorded and the run goes on to its final read
    (`harness shrink` needs the checker's anomaly, which only the final read shows).
    `invariants=False` skips the protocol invariants (benchmarks/sim_speed.py measures their
    cost)."""
    s = test.config
    params = s.workload_params
    schedule_params = test.schedule_params
    schedule = ScheduleRecord(out_dir / "schedule.json", schedule_params,
                              test.plan.entries_for(schedule_params), save_each_change=False)

    try:
        return run_simulation(out_dir, seed=s.seed, params=params, time_limit=s.time_limit,
                              system=dict(s.node_settings), n_nodes=s.nodes,
                              replication_factor=s.topic.replication_factor,
                              final_read_timeout=s.workload.final_read_timeout,
                              faults=nemesis_faults(schedule, s.topic.name, s.nemesis.link),
                              keep_going=keep_going, invariants=invariants,
                              startup_s=s.hosts.startup_s)
    finally:
        schedule.finish("time limit reached")
