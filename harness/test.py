"""A test, built once from a validated config: its typed settings (the one form it carries), where its hosts come from,
where its fault plan comes from, and the one clock everything in the run is timed by."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config import TestConfig, typed
from nemesis.schedule import ScheduleParams, load_schedule, replay_plan


@dataclass(frozen=True)
class Plan:
    """Where a run's faults come from: drawn from the seed, replayed from an earlier run's
    schedule.json (same times, same nodes), or scripted (tests, documented scenarios)."""

    source: str  # seeded | replayed | scripted
    entries: tuple[Mapping[str, Any], ...] | None = None
    replayed_from: Path | None = None

    @classmethod
    def seeded(cls) -> Plan:
        return cls("seeded")

    @classmethod
    def replayed(cls, run_dir: Path) -> Plan:
        entries = replay_plan(load_schedule(Path(run_dir) / "schedule.json"))
        return cls("replayed", tuple(entries), Path(run_dir))

    @classmethod
    def scripted(cls, entries: Sequence[Mapping[str, Any]]) -> Plan:
        return cls("scripted", tuple(entries))

    def entries_for(self, params: ScheduleParams) -> list[dict[str, Any]] | None:
        """The plan entries, or None for the seed's own plan (ScheduleRecord draws it)."""
        return None if self.entries is None else [dict(e) for e in self.entries]


class RunClock:
    """The one clock of a run. History times, schedule times and node events are all read
    off it: history `time` is ns since the run started (monotonic), schedule times are
    seconds since the workload started on the same clock, and node events -- stamped with
    the hosts' wall clock -- are mapped onto it through the wall time at the start."""

    def __init__(self) -> None:
        self.wall_start = time.time()
        self.mono_start_ns = time.monotonic_ns()
        self.workload_start_ns: int | None = None

    def ns(self) -> int:
        return time.monotonic_ns() - self.mono_start_ns

    def mark_workload_start(self) -> None:
        self.workload_start_ns = self.ns()

    def workload_seconds(self) -> float:
        """Seconds since the workload started (the schedule's time axis)."""
        if self.workload_start_ns is None:
            raise RuntimeError("the workload has not started")
        return (self.ns() - self.workload_start_ns) / 1e9

    def from_wall(self, ts: float) -> int:
        """A host's wall-clock timestamp as ns on the run clock."""
        return int((ts - self.wall_start) * 1e9)


@dataclass(frozen=True)
class Test:
    """What to run: the typed config, where results go, where faults come from."""

    __test__ = False  # not a pytest test class

    config: TestConfig  # the one form of the config; test.json records config.record()
    results_root: Path
    argv: tuple[str, ...] = ()
    plan: Plan = field(default_factory=Plan.seeded)
    check: bool = True  # check and report when the run is over

    @property
    def schedule_params(self) -> ScheduleParams:
        return self.config.schedule_params

    @classmethod
    def of(cls, config: TestConfig | Mapping[str, Any], results_root: Path, *,
           argv: Sequence[str] = (), plan: Plan | None = None, check: bool = True) -> Test:
        """`config` typed, or a validated config dict (a file's, a campaign cell's, a stored
        test.json's), typed here once."""
        settings = config if isinstance(config, TestConfig) else typed(config)
        return cls(settings, Path(results_root), tuple(argv), plan or Plan.seeded(), check)
