"""harness shrink: ddmin on pure predicates, and one real shrink of a simulated failing run,
end to end -- the minimal run replays byte for byte and its report tells the story."""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import pytest

from harness.commands.simulate import campaign_config
from harness.config import ConfigError, load_config, typed
from harness.minimal import MINIMAL, replay_test
from harness.report.story import Story, build_story
from harness.shrink import (
    SHRUNK,
    Budget,
    Candidate,
    Evaluator,
    Outcome,
    ddmin,
    shrink,
    target_class,
)
from harness.sim_run import as_simulated
from harness.simulate import DETERMINISM_FILES, first_divergence, simulate_test
from harness.test import Plan, Test

ROOT = Path(__file__).resolve().parents[2]



def _story_text(story: Story) -> str:
    """The story's steps, numbered, and its replay command: one string to search."""
    lines = [f"{i}. {s}" for i, s in enumerate(story.steps, start=1)]
    return "\n".join(lines + [f"replay: {story.replay}"])

def _one_minimal(result, fails) -> bool:
    return all(not fails(result[:i] + result[i + 1:]) for i in range(len(result)))


@pytest.mark.parametrize("needed", [{7}, {3, 11}, {0, 19}, {2, 5, 13, 17}, set(range(20))])
def test_ddmin_finds_exactly_the_needed_elements(needed):
    calls = []

    def fails(subset):
        calls.append(len(subset))
        return needed <= set(subset)

    assert ddmin(list(range(20)), fails) == sorted(needed)
    assert len(calls) < 200


def test_ddmin_empty_when_the_predicate_needs_nothing():
    assert ddmin([1, 2, 3], lambda s: True) == []


def test_ddmin_is_one_minimal_on_random_monotone_predicates():
    rng = random.Random(5)
    for _ in range(50):
        n = rng.randrange(1, 16)
        # fails when the subset contains one of a few "causes" (each a set of elements)
        causes = [set(rng.sample(range(n), rng.randrange(1, min(n, 3) + 1)))
                  for _ in range(rng.randrange(1, 4))]

        def fails(subset, causes=causes):
            return any(c <= set(subset) for c in causes)

        result = ddmin(list(range(n)), fails)
        assert fails(result)
        assert result == sorted(result)  # order kept
        assert _one_minimal(result, fails)
        assert any(c == set(result) for c in causes)  # a single cause, nothing more


def test_ddmin_on_a_non_monotone_predicate_stays_one_minimal():
    def fails(subset):  # an even number of elements, at least 2
        return len(subset) >= 2 and len(subset) % 2 == 0

    result = ddmin(list(range(9)), fails)
    assert fails(result) and _one_minimal(result, fails)


def test_budget_parses_seconds_and_candidates():
    assert Budget("80c").candidates == 80 and Budget("80c").seconds is None
    assert Budget("30s").seconds == 30 and Budget("30").seconds == 30
    assert not Budget(None).exhausted()


class _Table(Evaluator):
    """An Evaluator whose outcomes come from a table keyed by workload.acks (no simulation):
    the predicate logic alone."""

    def __init__(self, losing: set[str], **kw) -> None:
        super().__init__("lost-write", Budget(None), **kw)
        self.losing = losing

    def outcome(self, cand):
        lost = cand.config.workload.acks in self.losing
        return Outcome({"lost-write": 3} if lost else {}, 10, 10, 0.0)


def test_against_keeps_only_candidates_whose_safe_twin_passes():
    weak = Candidate(typed(load_config(overrides={"workload.acks": "1"})), ())
    assert _Table({"1"}).fails(weak)
    assert _Table({"1"}, against=["workload.acks=all"]).fails(weak)
    # a schedule that loses under the safe setting too is no reproduction of the weakness
    assert not _Table({"1", "all"}, against=["workload.acks=all"]).fails(weak)
    assert not _Table(set(), against=["workload.acks=all"]).fails(weak)


def test_against_with_an_unknown_key_is_a_config_error():
    weak = Candidate(typed(load_config()), ())
    with pytest.raises(ConfigError, match="unknown key 'system.nope'"):
        _Table({"1"}, against=["system.nope=1"]).twin(weak)


def test_target_class_takes_loss_classes_first():
    results = {"anomalies": {"stale-read": {"count": 4}, "inconsistent-offsets": {"count": 2},
                             "lost-write": {"count": 1}}}
    assert target_class(results) == "lost-write"
    assert target_class({"anomalies": {"stale-read": {"count": 4}}}) == "stale-read"
    assert target_class({"anomalies": {}}) is None


# ---- one real shrink ---------------------------------------------------------------------------

# no-elr: pausing both followers leaves the leader (n2) as the last ISR member; its power loss
# then drops its unflushed tail, and it is elected again (pre-KIP-966) with the tail missing.
# The kill and the partition afterwards change nothing: the shrinker must drop them.
SCHEDULE = [
    {"id": 0, "kind": "pause", "start_s": 1.5, "duration_s": 4.0,
     "target": {"fixed": {"nodes": ["n3", "n4"]}}},
    {"id": 1, "kind": "power-loss", "start_s": 3.5, "duration_s": 0.5,
     "target": {"fixed": {"nodes": ["n2"]}}, "after": 0},
    {"id": 2, "kind": "kill", "start_s": 6.5, "duration_s": 0.5,
     "target": {"fixed": {"nodes": ["n4"]}}},
    {"id": 3, "kind": "partition", "start_s": 7.2, "duration_s": 0.6,
     "target": {"fixed": {"grudge": {"n3": ["n4"], "n4": ["n3"]}}}},
]


def _small_no_elr_config() -> dict:
    args = argparse.Namespace(campaign=ROOT / "campaigns/validation.toml", cell="no-elr",
                              seed=3, time_limit=9)
    config = as_simulated(campaign_config(args))
    config["workload"].update(producers=2, rate=60, consumers=1, final_read_timeout=20)
    return config


def test_shrink_a_simulated_run_end_to_end(tmp_path):
    original = simulate_test(Test.of(_small_no_elr_config(), tmp_path,
                                     plan=Plan.scripted(SCHEDULE)),
                             backend="reference", keep_going=True)
    results = json.loads((original / "results.json").read_text())
    assert results["anomalies"]["lost-write"]["count"] > 0, "the scripted run must lose"

    lines: list[str] = []
    r = shrink(original, budget="30c", log=lines.append)
    assert r.target == "lost-write"
    assert r.before.faults == 4 and r.after.faults <= 2
    assert r.after_outcome.sends <= r.before_outcome.sends
    assert any(line.startswith("accepted") for line in lines)

    minimal = r.minimal_dir
    doc = json.loads((minimal / MINIMAL).read_text())
    assert doc["seed"] == 3 and doc["anomaly"] == "lost-write"
    assert len(doc["schedule"]) == r.after.faults
    assert doc["shrink"]["faults_before"] == 4
    mres = json.loads((minimal / "results.json").read_text())
    assert mres["anomalies"]["lost-write"]["count"] > 0

    # `harness simulate --replay minimal.json`: the same bytes.
    replayed = simulate_test(replay_test(minimal / MINIMAL, tmp_path / "replay", ["t"]),
                             backend="reference", keep_going=True)
    assert first_divergence(replayed, minimal) is None
    assert all((minimal / name).is_file() for name in DETERMINISM_FILES)

    # The story, in the minimal run's report and (through shrunk.json) in the original's.
    pointer = json.loads((original / SHRUNK).read_text())
    assert (original / pointer["minimal_json"]).resolve() == (minimal / MINIMAL).resolve()
    story = build_story(minimal)
    text = _story_text(story)
    assert story.steps[0].startswith("broker 1 leads epoch")
    assert "loses power" in text and "truncates offsets" in text
    assert "acknowledged record" in story.steps[-1]
    assert f"harness simulate --replay {minimal / MINIMAL}" in text
    for folder in (minimal, original):
        html = (folder / "report.html").read_text()
        assert 'id="minimal-reproduction"' in html and "truncates offsets" in html
    assert build_story(original).link.endswith("report.html")


def test_a_real_runs_schedule_maps_into_the_simulator(tmp_path):
    """A real-host run: its realised schedule (resolved targets, started times) becomes a
    scripted simulated candidate; kinds the simulator cannot apply are left out."""
    run = tmp_path / "real"
    run.mkdir()
    config = _small_no_elr_config()
    config["hosts"] = {"provider": "netns"}
    config["nemesis"]["faults"] = ["pause", "power-loss", "slow-link"]
    (run / "test.json").write_text(json.dumps({"name": config["name"], "seed": 3,
                                               "hosts": "netns", "config": config}))
    faults = [dict(SCHEDULE[0], target={"select": "followers", "partition": 0, "pick": 1},
                   resolved={"nodes": ["n3", "n4"]}, started_s=1.61, ended_s=5.7,
                   outcome="ok", error=None, after=None),
              dict(SCHEDULE[1], target={"select": "last-isr-member", "partition": 0, "pick": 2},
                   resolved={"nodes": ["n2"]}, started_s=3.52, ended_s=4.1, outcome="ok",
                   error=None)]
    (run / "schedule.json").write_text(json.dumps(
        {"format": 1, "params": typed(config).schedule_params.to_dict(), "faults": faults}))
    from harness.shrink import start_candidate
    cand, real_hosts, notes = start_candidate(run)
    assert real_hosts == {"provider": "netns"} and not notes  # where minimal.json reruns it
    assert cand.config.hosts.record() == {"provider": "sim", "toxiproxy": "auto"}
    assert [e["target"] for e in cand.entries] == [{"fixed": {"nodes": ["n3", "n4"]}},
                                                   {"fixed": {"nodes": ["n2"]}}]
    assert [e["start_s"] for e in cand.entries] == [1.61, 3.52]
    assert cand.entries[1]["after"] == 0


def test_story_names_faults_as_a_reader_would():
    from harness.report.story import _fault_text
    base = {"started_s": 1.0, "ended_s": 3.5}
    halves = {"n1": ["n2", "n3"], "n2": ["n1", "n4"], "n3": ["n1", "n4"], "n4": ["n2", "n3"]}
    assert _fault_text(dict(base, kind="partition", resolved={"grudge": halves}), None) == \
        "the network is split: {n1, n4} | {n2, n3} for 2.50 s"
    isolate = {"n1": ["n2"], "n2": ["n1", "n3", "n4"], "n3": ["n2"], "n4": ["n2"]}
    assert _fault_text(dict(base, kind="partition", resolved={"grudge": isolate}), None) == \
        "broker 1 (n2) is cut off from n1, n3, n4 for 2.50 s"
    assert _fault_text(dict(base, kind="partition", resolved={"grudge": {"n3": ["n4"],
                                                                          "n4": ["n3"]}}),
                       None) == "the network is cut: link n3<->n4 for 2.50 s"
    lost = {"n2": {"lost_records": 7}}
    assert _fault_text(dict(base, kind="power-loss", resolved={"nodes": ["n2"]}), lost) == \
        "broker 1 (n2) loses power for 2.50 s, losing 7 unflushed records"
    assert _fault_text(dict(base, kind="kill", resolved={"nodes": ["n3", "n2"]}), None) == \
        "brokers 1, 2 (n2, n3) are killed for 2.50 s"
