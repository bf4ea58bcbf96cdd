"""The protocol invariants checked after every simulated step (simulation/invariants.py).

Must-fail twins: each weakness of docs/replication.md's "Alternative behaviours" -- the six
switches -- violates its invariant in a simulated run under a scripted episode aimed at it
(tests/support/scenarios.py `weakness`, and `shrink_then`, a plan the nemesis carries out),
searching a few seeds; the safe
configuration under the same episodes violates none and loses nothing. The trace checker
(checkers/trace.py), given the same run's events.jsonl and history.jsonl, finds the same
invariant. The longer search over more seeds is marked `slow`."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from support.lookups import count_lookups
from support.scenarios import acknowledged_loss, shrink_then, weakness

from checkers.trace import check_run
from harness.campaign_spec import load_spec
from harness.sim_run import as_simulated, simulate_into
from harness.test import Test
from runformat.run_config import RunConfig
from simulation.run import run_simulation
from workloads.kafka import WorkloadParams

# harness/profiles/fast.toml's timeouts with MinISR 2 (campaigns/validation.toml's base)
SAFE = {"broker.session.timeout.ms": 2000, "broker.heartbeat.interval.ms": 200,
        "replica.lag.time.max.ms": 2000, "unclean.recovery.timeout.ms": 500,
        "min.insync.replicas": 2}

# weakness, node config, producer acks, the episode, the invariant it must violate
TWINS = [
    ("acks=1", {}, "1", lambda run_dir: weakness("isolate-leader", "chaos", run_dir), "AcknowledgedCompleteness"),
    ("unclean.leader.election.enable", {"unclean.leader.election.enable": True}, "all",
     lambda run_dir: weakness("stale-follower", "chaos", run_dir), "LeaderCompleteness"),
    ("eligible.leader.replicas.enable=false", {"eligible.leader.replicas.enable": False}, "all",
     lambda run_dir: shrink_then("power-loss", "chaos", run_dir), "LeaderCompleteness"),
    ("replica.truncation=high-watermark", {"replica.truncation": "high-watermark"}, "all",
     lambda run_dir: weakness("pause-pair", "chaos", run_dir), "LeaderCandidateCompleteness"),
    ("unclean.shutdown.detection=false", {"unclean.shutdown.detection": False}, "all",
     lambda run_dir: weakness("elr-power-loss", "chaos", run_dir), "LeaderCandidateCompleteness"),
    ("isr.update=local-first", {"isr.update": "local-first"}, "all",
     lambda run_dir: weakness("halves", "chaos", run_dir), "LeaderCompleteness"),
]
EPISODES = {"isolate-leader": lambda run_dir: weakness("isolate-leader", "chaos", run_dir),
            "stale-follower": lambda run_dir: weakness("stale-follower", "chaos", run_dir),
            "shrink-then-power-loss": lambda run_dir: shrink_then("power-loss", "chaos", run_dir),
            "pause-pair": lambda run_dir: weakness("pause-pair", "chaos", run_dir),
            "elr-power-loss": lambda run_dir: weakness("elr-power-loss", "chaos", run_dir),
            "halves": lambda run_dir: weakness("halves", "chaos", run_dir)}


def simulate(tmp: Path, seed: int, system: dict, acks: str = "all", faults=None, *,
             keep_going: bool = True, time_limit: float = 8.0, invariants: bool = True):
    params = WorkloadParams(topic="chaos", partitions=1, acks=acks, rate=300.0, producers=16,
                            consumers=2, request_timeout_s=3.0, seed=seed)
    return run_simulation(tmp, seed=seed, params=params, time_limit=time_limit,
                          system={**SAFE, **system}, faults=faults, final_read_timeout=30,
                          keep_going=keep_going, invariants=invariants)


def trace_names(run_dir: Path, system: dict, acks: str) -> set[str]:
    config = {"system": {**SAFE, **system}, "workload": {"acks": acks}, "topic": {"name": "chaos"}}
    report = check_run(run_dir, RunConfig.of(config))
    assert report is not None
    return {v["name"].removeprefix("invariant:") for v in report.violations}


def names(result) -> set[str]:
    return {v["name"].removeprefix("invariant:") for v in result.invariants}


@pytest.mark.parametrize("weakness_name, system, acks, episode, expected", TWINS,
                         ids=[t[0] for t in TWINS])
def test_each_weakness_violates_its_invariant(tmp_path, weakness_name, system, acks, episode, expected):
    seen = {}
    for seed in (1, 2, 3):
        r = simulate(tmp_path / f"s{seed}", seed, system, acks, episode(tmp_path / f"s{seed}"))
        seen[seed] = names(r)
        if expected in seen[seed]:
            break
    else:
        pytest.fail(f"{weakness_name}: no seed violated {expected}; found {seen}")
    # the file the checker merges, and the same run's trace
    lines = (r.out_dir / "invariants.jsonl").read_text().splitlines()
    assert len(lines) == len(r.invariants) and all(json.loads(x)["recent_steps"] for x in lines)
    assert expected in trace_names(r.out_dir, system, acks)


@pytest.mark.parametrize("episode", sorted(EPISODES))
def test_the_safe_configuration_violates_nothing(tmp_path, episode):
    for seed in (1, 2):
        r = simulate(tmp_path / f"s{seed}", seed, {}, "all", EPISODES[episode](tmp_path / f"s{seed}"))
        loss = acknowledged_loss(r.history)
        assert r.invariants == [], r.invariants[0]
        assert loss.final_complete and loss.lost == [] and len(loss.acked) > 300
        assert trace_names(r.out_dir, {}, "all") == set()


def test_the_first_violation_stops_the_run_with_the_steps_that_led_to_it(tmp_path):
    # MinISR 1 without ELR: the leader alone acknowledges (as Kafka does at MinISR 1), so the
    # power loss itself destroys acknowledged records and is among the violation's last steps
    system = {"eligible.leader.replicas.enable": False, "min.insync.replicas": 1}
    r = simulate(tmp_path, 1, system, "all", shrink_then("power-loss", "chaos", tmp_path),
                 keep_going=False)
    (v,) = r.invariants
    assert r.stopped_by and v["name"] in r.stopped_by and r.final_read == {}
    assert [json.loads(x) for x in (tmp_path / "invariants.jsonl").read_text().splitlines()] == [v]
    assert len(v["recent_steps"]) == 40 and v["recent_steps"][-1]["time"] <= v["time"]
    assert any(s["step"].startswith("fault power_loss") for s in v["recent_steps"])
    assert v["recent_events"] and v["time"] / 1e9 < r.virtual_s + 1


def test_checking_does_not_change_what_happens(tmp_path):
    on = simulate(tmp_path / "on", 4, {}, "all", weakness("halves", "chaos", tmp_path / "on"),
                  time_limit=5.0)
    off = simulate(tmp_path / "off", 4, {}, "all", weakness("halves", "chaos", tmp_path / "off"),
                   time_limit=5.0,
                   invariants=False)
    assert on.invariants == [] and off.invariants is None
    assert on.history.read_bytes() == off.history.read_bytes()
    assert on.events.read_bytes() == off.events.read_bytes()
    assert not (tmp_path / "off" / "invariants.jsonl").exists()


@pytest.mark.slow
@pytest.mark.parametrize("weakness_name, system, acks, episode, expected", TWINS,
                         ids=[t[0] for t in TWINS])
def test_every_run_that_loses_a_record_violates_an_invariant(tmp_path, weakness_name, system, acks,
                                                             episode, expected):
    """Over ten seeds: a run that lost an acknowledged record always violated an invariant
    (the invariants see at least what the history shows), and at least one did."""
    violated = 0
    for seed in range(1, 11):
        r = simulate(tmp_path / f"s{seed}", seed, system, acks, episode(tmp_path / f"s{seed}"))
        lost = acknowledged_loss(r.history).lost
        assert not lost or r.invariants, f"seed {seed} lost {len(lost)} records unseen by the invariants"
        violated += bool(r.invariants)
    assert violated


def test_a_log_that_changes_lowers_what_it_is_known_to_share():
    """The monitor's incremental state (PartitionSnapshot.pairs, the comparisons with the
    committed prefix) is only sound if a truncation or loss lowers it: LogMatching does not
    compare below it again, nor the look-ups of acknowledged records."""
    from simulation.invariants import _log_changed, _Part

    part = _Part(("chaos", 0))
    part.compared = {1: 50, 2: 40, 3: 30}
    part.differs = {1: [], 2: [(10, 11), (15, 25), (35, 36)], 3: [(29, 30)]}
    part.pairs = {(1, 2): 45, (1, 3): 30, (2, 3): 12}
    _log_changed(part, 2, 20)
    assert part.compared == {1: 50, 2: 20, 3: 30}
    assert part.differs == {1: [], 2: [(10, 11), (15, 20)], 3: [(29, 30)]}  # 20 on: again
    assert part.pairs == {(1, 2): 20, (1, 3): 30, (2, 3): 12}


def test_after_an_unclean_election_what_every_log_holds_is_not_looked_up_again(tmp_path,
                                                                                 monkeypatch):
    """The validation campaign's unclean-election cell, seed 1 (31 simulated seconds under its
    own faults), checked at every step and then replayed as a trace. After the election every
    log leaves the committed prefix at a record that was committed but never acknowledged, so
    no look-up stops early: before the monitor and the replay kept where each log differs
    (ReplicaState.differs), they looked up 1,439,136 and 1,064,512 records; now 7,764 and
    8,124. The bound counts look-ups, not time."""
    looked = count_lookups(monkeypatch)
    _, cells = load_spec(Path(__file__).resolve().parents[2] / "campaigns" / "validation.toml")
    config = copy.deepcopy(next(c.resolved for c in cells if c.config == "unclean-election"))
    config = as_simulated({**config, "seed": 1})
    result = simulate_into(Test.of(config, tmp_path, check=False), tmp_path, keep_going=True)
    assert result.invariants  # the election's loss is seen
    assert looked[0] < 100_000
    looked[0] = 0
    report = check_run(tmp_path, RunConfig.of(config))
    assert report is not None and report.violations
    assert looked[0] < 100_000


def test_a_violation_records_its_recent_steps_as_they_are_described_afresh():
    """The recent steps keep their descriptions between violations (a detail's repr is made
    once): each violation still gets the steps in `recent` now, as `_describe_step` gives
    them, in dicts of its own."""
    from collections import deque
    from types import SimpleNamespace

    from replication.messages import ProduceRequest
    from simulation.invariants import InvariantMonitor, _describe_step

    msg = ProduceRequest("chaos", 0, ("1", "2"), "all")
    monitor = SimpleNamespace(recent=deque(maxlen=4))
    monitor.recent.extend([[0.5, "n2", "request", msg, None], [0.75, "n3", "tick", None, None]])
    first = InvariantMonitor._recent_steps(monitor)
    first[0]["detail"] = "changed by a reader"
    monitor.recent.extend([[1.0, "n2", "answer", "x" * 300, None], [1.25, "-", "fault kill", None, None]])
    second = InvariantMonitor._recent_steps(monitor)
    assert second == [_describe_step(s) for s in monitor.recent]
    assert second[0]["detail"] == repr(msg)  # not what a reader of the first record wrote
    assert [s["time"] for s in second] == [500_000_000, 750_000_000, 1_000_000_000,
                                          1_250_000_000]
    assert second[2]["detail"].endswith("...") and len(second[2]["detail"]) == 240
    monitor.recent.append([1.5, "n4", "tick", None, None])
    assert [s["time"] for s in InvariantMonitor._recent_steps(monitor)][0] == 750_000_000
