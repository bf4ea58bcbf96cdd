"""Deterministic nemesis schedules, their realised record (schedule.json) and its reader.

A plan is a list of plain-data fault entries, the same for the same parameters on any machine:

    {"id": 3, "kind": "kill", "start_s": 41.207, "duration_s": 5.83,
     "target": {"select": "leader", "partition": 1, "pick": 918273}}

`start_s` counts from the start of the workload. Targets are symbolic where only live metadata
can say which node is meant; the runner resolves them when the fault starts:

  process and host faults (kill, pause, restart, power-loss, page-cache-loss, torn-power-loss):
    {"select": "leader" | "last-isr-member" | "elr-members" | "followers", "partition": p}
    {"select": "successor" | "elr-member", "partition": p}   (scripted plans only: the
        replica the controller elects next, one ELR member chosen with "pick")
    {"select": "random-broker" | "controller" | "majority"}
  partition: {"shape": "isolate" | "halves" | "majority-ring" | "bridge" | "isolate-controller"}
             {"shape": "isolate-leader", "partition": p}
  outage:    {"count": k}   (k broker hosts lose power together)
  link faults (slow-link, lossy-link, reset-link): as process faults, without "last-isr-member"
             and "elr-members"
  corrupt-segment: {"select": "leader" | "followers", "partition": p} or "random-broker"
  replay:    {"fixed": <the resolved target recorded by an earlier run>}
             {"roles": {"nodes": [role, ...]} | {"grudge": {role: [role, ...]}}}: the parts
             the nodes played in an earlier run, cast again now (nemesis.roles)

Every target carries "pick", an integer the runner uses to seed any random choice it makes
while resolving (which broker, which halves), so resolution is reproducible too. A scripted
plan's target may also wait for a partition state before it is hit (nemesis.until):

    "until": {"isr_at_most": n, "elr_at_least": n, "timeout_s": t}   (either test or both)

and while it waits its episode's clock stands still: the faults after it in the episode start,
and the faults it overlaps are healed, as much later (nemesis.faults).

Faults come in episodes separated by quiet gaps (mean `interval`); an episode is one fault
(mean `duration`) or, with probability `shrink_first` when a fault is aimed at a partition's
leader, two overlapping ones: the partition's followers are paused until the leader's ISR has
shrunk to the leader alone (`shrink_wait` s), then the fault hits the last ISR member, and the
followers resume while it is still down. Episodes never overlap and end before `time_limit`.

schedule.json (written by ScheduleRecord as the run goes, read by load_schedule):

    {"format": 1, "params": {<ScheduleParams>},
     "faults": [{<plan entry>, "after": id | null, "resolved": {...} | null,
                 "started_s": float | null, "ended_s": float | null,
                 "outcome": "pending" | "ok" | "failed" | "skipped" | "interrupted",
                 "error": str | null,
                 "roles": {node: role} | null}, ...]}   (nemesis.roles; absent in older files)
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from control.files import write_json_atomic
from nemesis.kinds import KNOWN_FAULTS, TARGET_MODES, lookup
from nemesis.kinds.base import PICK_RANGE, PlanParams
from nemesis.until import until_error

FORMAT = 1
OUTCOMES = ("pending", "ok", "failed", "skipped", "interrupted")
# Families whose leader-aimed faults may come as a shrink-first episode (see plan()).
_SHRINKABLE = ("process", "host")


@dataclass(frozen=True)
class ScheduleParams:
    seed: int
    faults: tuple[str, ...]
    time_limit: float
    interval: float
    duration: float
    partitions: int = 1
    brokers: int = 3
    targets: str = "auto"
    weights: Mapping[str, float] = field(default_factory=dict)  # kind -> weight, default 1
    shrink_first: float = 0.0
    shrink_wait: float = 16.0  # s for the ISR to shrink; see TestConfig.schedule_params

    def __post_init__(self) -> None:
        bad = [f for f in self.faults if f not in KNOWN_FAULTS]
        if bad:
            raise ValueError(f"unknown fault kinds {bad}; known: {', '.join(KNOWN_FAULTS)}")
        if self.targets not in TARGET_MODES:
            raise ValueError(f"targets must be one of {TARGET_MODES}, got {self.targets!r}")
        if min(self.time_limit, self.interval, self.duration) <= 0 or self.shrink_wait < 0:
            raise ValueError("time_limit, interval and duration must be > 0, shrink_wait >= 0")
        if self.partitions < 1 or self.brokers < 1 or not 0 <= self.shrink_first <= 1:
            raise ValueError("partitions and brokers must be >= 1, shrink_first in 0..1")
        for kind in self.faults:  # a kind that cannot be aimed so says it now, not mid-run
            lookup(kind).plan_target(random.Random(0), PlanParams(self.partitions, self.brokers,
                                                                  self.targets))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["faults"], d["weights"] = list(self.faults), dict(self.weights)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ScheduleParams:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown schedule parameters: {sorted(unknown)}")
        return cls(**{**d, "faults": tuple(d.get("faults", ())),
                      "weights": dict(d.get("weights", {}))})


def plan(params: ScheduleParams) -> list[dict[str, Any]]:
    """The planned faults, ordered by start time. Pure: same params, same list."""
    # A string seed is hashed with SHA-512 by random.Random: stable across runs and machines,
    # and independent of the workload's own use of the run seed.
    rng = random.Random(f"nemesis-schedule:{params.seed}")
    kinds = [k for k in params.faults if params.weights.get(k, 1.0) > 0]
    entries: list[dict[str, Any]] = []
    t = _jitter(rng, params.interval)
    while kinds:
        kind = _weighted(rng, {k: params.weights.get(k, 1.0) for k in kinds})
        length = _jitter(rng, params.duration)
        target = lookup(kind).plan_target(rng, PlanParams(params.partitions, params.brokers,
                                                          params.targets))
        shrink = (lookup(kind).family in _SHRINKABLE and target.get("select") == "leader"
                  and rng.random() < params.shrink_first)
        if shrink:
            episode = _shrink_episode(rng, kind, target, length, params.shrink_wait)
        else:
            episode = [(0.0, length, kind, target)]
        end = t + max(offset + dur for offset, dur, _, _ in episode)
        if end > params.time_limit:
            break
        first_id = len(entries)
        for offset, dur, k, tgt in episode:
            entry = {"id": len(entries), "kind": k, "start_s": round(t + offset, 3),
                     "duration_s": round(dur, 3), "target": tgt}
            if len(entries) > first_id:
                entry["after"] = first_id
            entries.append(entry)
        t = end + _jitter(rng, params.interval)
    return entries


def _jitter(rng: random.Random, mean: float) -> float:
    """Uniform in [mean/2, 3*mean/2]: bounded, with the requested mean."""
    return mean * rng.uniform(0.5, 1.5)


def _weighted(rng: random.Random, weights: Mapping[str, float]) -> str:
    names = list(weights)
    return rng.choices(names, weights=[weights[n] for n in names])[0]


def _shrink_episode(rng: random.Random, kind: str, target: Mapping[str, Any], length: float,
                    wait: float) -> list[tuple[float, float, str, dict[str, Any]]]:
    p = target["partition"]
    pause = {"select": "followers", "partition": p, "pick": rng.randrange(PICK_RANGE)}
    hit = {"select": "last-isr-member", "partition": p, "pick": target["pick"]}
    # The followers resume halfway through the hit, while the last ISR member is still down.
    return [(0.0, wait + length / 2, "pause", pause), (wait, length, kind, hit)]


# ---- the realised schedule -----------------------------------------------------------------

@dataclass
class RealisedFault:
    """A planned fault and what became of it; times are seconds since the workload started."""

    id: int
    kind: str
    start_s: float
    duration_s: float
    target: dict[str, Any]
    after: int | None = None
    resolved: dict[str, Any] | None = None  # e.g. {"nodes": ["n2"]}, as the runner resolved it
    started_s: float | None = None
    ended_s: float | None = None
    outcome: str = "pending"  # pending | ok | failed | skipped | interrupted
    error: str | None = None
    # node -> the part it played as the fault started ("leader", "isr-follower#1", ...;
    # nemesis.roles): what `harness reproduce --system` replays on another system
    roles: dict[str, str] | None = None

    @classmethod
    def from_plan(cls, entry: Mapping[str, Any]) -> RealisedFault:
        return cls(**{k: entry[k] for k in ("id", "kind", "start_s", "duration_s", "target")},
                   after=entry.get("after"))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class ScheduleRecord:
    """The realised schedule, rewritten atomically to `path` on every change, so schedule.json
    is complete up to the last event even if the run is killed. Thread-safe.

    `save_each_change=False` writes it when made and at `finish()` only: for a simulated run,
    which its seed replays exactly and whose history is buffered as well (a killed simulation
    leaves neither complete). Each rewrite is two fsyncs and, under PyPy, cold JSON code: 5-6
    ms, 4-5 % of a simulated run under its faults there."""

    def __init__(self, path: Path, params: ScheduleParams,
                 entries: Sequence[Mapping[str, Any]] | None = None, *,
                 save_each_change: bool = True) -> None:
        self.path = Path(path)
        self.params = params
        self._save_each_change = save_each_change
        self.faults = [RealisedFault.from_plan(e) for e in (plan(params) if entries is None
                                                            else entries)]
        self._by_id = {f.id: f for f in self.faults}
        self._lock = threading.Lock()
        self.save()

    def started(self, fault_id: int, resolved: Mapping[str, Any], at_s: float,
                roles: Mapping[str, str] | None = None) -> None:
        self._update(fault_id, resolved=dict(resolved), started_s=round(at_s, 6),
                     roles=dict(roles) if roles is not None else None)

    def ended(self, fault_id: int, at_s: float, outcome: str = "ok",
              error: str | None = None) -> None:
        self._update(fault_id, ended_s=round(at_s, 6), outcome=outcome, error=error)

    def skipped(self, fault_id: int, reason: str) -> None:
        """Never started: its target could not be resolved, or the run ended first."""
        self._update(fault_id, outcome="skipped", error=reason)

    def finish(self, reason: str = "run ended") -> None:
        """Mark faults still pending as skipped and started-but-unended ones as interrupted."""
        with self._lock:
            for f in self.faults:
                if f.outcome == "pending":
                    f.outcome = "interrupted" if f.started_s is not None else "skipped"
                    f.error = f.error or reason
            self._save_locked()

    def save(self) -> None:
        with self._lock:
            self._save_locked()

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "params": self.params.to_dict(),
                "faults": [f.to_dict() for f in self.faults]}

    def _update(self, fault_id: int, **changes: Any) -> None:
        if changes.get("outcome", "ok") not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, got {changes['outcome']!r}")
        with self._lock:
            try:
                fault = self._by_id[fault_id]
            except KeyError:
                raise KeyError(f"no fault with id {fault_id} in the schedule") from None
            for key, value in changes.items():
                setattr(fault, key, value)
            if self._save_each_change:
                self._save_locked()

    def _save_locked(self) -> None:
        write_json_atomic(self.path, self.to_dict())


@dataclass(frozen=True)
class LoadedSchedule:
    params: ScheduleParams
    faults: list[RealisedFault]


def load_schedule(path: Path) -> LoadedSchedule:
    """Read a run's schedule.json, with errors naming the file and the faulty entry."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} line {e.lineno}: malformed JSON: {e.msg}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path}: expected a schedule object with \"format\": {FORMAT}")
    try:
        params = ScheduleParams.from_dict(data["params"])
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: bad \"params\": {e}") from None
    faults = []
    for i, entry in enumerate(data.get("faults", [])):
        try:
            fault = RealisedFault(**entry)
        except TypeError as e:
            raise ValueError(f"{path}: faults[{i}]: {e}") from None
        if fault.kind not in KNOWN_FAULTS or fault.outcome not in OUTCOMES:
            raise ValueError(f"{path}: faults[{i}]: unknown kind {fault.kind!r} "
                             f"or outcome {fault.outcome!r}")
        faults.append(fault)
    return LoadedSchedule(params, faults)


def plan_entries(entries: Any, source: str) -> list[dict[str, Any]]:
    """Plan entries read from a file (a shrunk reproduction's "schedule"), checked for the
    shape every consumer relies on; a ValueError names the file and the entry."""
    if not isinstance(entries, list):
        raise ValueError(f"{source}: the schedule must be a list of fault entries")
    out = []
    for i, e in enumerate(entries):
        where = f"{source}: schedule[{i}]"
        if not isinstance(e, dict):
            raise ValueError(f"{where}: expected an object, got {json.dumps(e)[:60]}")
        missing = [k for k in ("id", "kind", "start_s", "duration_s", "target") if k not in e]
        if missing:
            raise ValueError(f"{where}: missing {', '.join(missing)}")
        if e["kind"] not in KNOWN_FAULTS:
            raise ValueError(f"{where}: unknown kind {e['kind']!r:.40}")
        ints = [e["id"]] + ([] if e.get("after") is None else [e["after"]])
        if any(isinstance(x, bool) or not isinstance(x, int) for x in ints):
            raise ValueError(f"{where}: id and after must be integers")
        times = (e["start_s"], e["duration_s"])
        if any(isinstance(t, bool) or not isinstance(t, int | float) or not 0 <= t < 1e9
               for t in times):
            raise ValueError(f"{where}: start_s and duration_s must be seconds >= 0")
        if not isinstance(e["target"], dict):
            raise ValueError(f"{where}: target must be an object")
        if "until" in e["target"] and until_error(e["target"]["until"]):
            raise ValueError(f"{where}: target {until_error(e['target']['until'])}")
        if "roles" in e["target"] and not _role_spec(e["target"]["roles"]):
            raise ValueError(f"{where}: target roles must be {{\"nodes\": [role, ...]}} or "
                             f"{{\"grudge\": {{role: [role, ...]}}}}")
        out.append(dict(e))
    return out


def _role_spec(spec: Any) -> bool:
    def names(x: Any) -> bool:
        return isinstance(x, list) and all(isinstance(r, str) for r in x)
    if not isinstance(spec, dict) or len(spec) != 1:
        return False
    if "nodes" in spec:
        return names(spec["nodes"])
    grudge = spec.get("grudge")
    return isinstance(grudge, dict) and all(names(v) for v in grudge.values())


def replay_plan(schedule: LoadedSchedule, concrete: bool = True) -> list[dict[str, Any]]:
    """Plan entries that replay a recorded run at its recorded times.

    Faults that never started are left out. With `concrete`, each fault's target is the one
    recorded as resolved ({"fixed": ...}), so the same nodes are hit; otherwise the symbolic
    target is resolved again against the new run's metadata."""
    def target_of(f: RealisedFault) -> dict[str, Any]:
        return {"fixed": f.resolved} if concrete and f.resolved is not None else f.target

    return replay_entries(schedule.faults, target_of)


def replay_entries(faults: Sequence[RealisedFault],
                   target_of: Callable[[RealisedFault], dict[str, Any] | None]
                   ) -> list[dict[str, Any]]:
    """Plan entries for realised faults at their recorded start times and durations, each
    aimed at target_of(fault); faults that never started, or that target_of gives no target
    (None), are left out."""
    out = []
    for f in faults:
        target = target_of(f) if f.started_s is not None else None
        if target is None:
            continue
        duration = f.ended_s - f.started_s if f.ended_s is not None else f.duration_s
        entry = {"id": f.id, "kind": f.kind, "start_s": f.started_s,
                 "duration_s": round(max(duration, 0.0), 6), "target": target}
        if f.after is not None:
            entry["after"] = f.after
        out.append(entry)
    return sorted(out, key=lambda e: (e["start_s"], e["id"]))
