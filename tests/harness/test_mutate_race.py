"""`harness mutate --lanes N` (harness/mutate/race.py, docs/mutation.md "Racing a mutant's cells"): each
mutant's cells searched seed by seed, dealt to N children at once, the first kill stopping
the others. The order and the folding of the lanes' answers as pure logic; then a real race on
the simulator: the mutant known to break acks=all killed in the lane of a short cell while the
other lane's child, still simulating a long seed, is killed, and a mutant whose runs are the
unmutated code's searched through every step of both lanes."""

from __future__ import annotations

import argparse
from dataclasses import replace

import pytest
from test_mutate import HWM_MAX, _row

from harness.commands.mutate import cells, lanes_option
from harness.config import load_config, typed
from harness.mutate.child import ROOT
from harness.mutate.race import dealt, interleaved, race_all, race_task, race_tasks, record_race
from harness.mutate.score import BASELINE, CHILDREN, Cell, Result, local_runner

# Client.produce is the command line's (python -m replication produce): no simulated run calls it
SAME_AS_UNMUTATED = "replication/client.py:Client.produce:drop-stmt:cc56d24d:0"


def test_the_cells_are_interleaved_seed_by_seed_and_dealt_to_the_lanes_in_turn() -> None:
    steps = interleaved(["a", "b", "c"], [1, 2])
    assert steps == [("a", 1), ("b", 1), ("c", 1), ("a", 2), ("b", 2), ("c", 2)]
    assert dealt(steps, 2) == [[("a", 1), ("c", 1), ("b", 2)], [("b", 1), ("a", 2), ("c", 2)]]
    assert dealt(steps[:1], 2) == [[("a", 1)]]  # no empty lane
    assert sorted(s for lane in dealt(steps, 4) for s in lane) == sorted(steps)


def _cell_row(cell: str, seed: int, valid, **kw) -> dict:
    return {**_row(seed, valid, **kw), "cell": cell}


BASELINES = {"a": {s: _row(s, True) for s in (1, 2)}, "b": {s: _row(s, True) for s in (1, 2)}}


def test_a_race_is_folded_in_the_order_its_answers_came_and_a_stopped_lane_counts_nothing() -> None:
    """Lane b killed at its seed 1 first; lane a's block had come before it, clean; the lane
    stopped after the kill adds nothing. The wall time is the race's, not a sum of lanes."""
    answer = {"mutant": "m", "wall_s": 7.5, "answers": [
        {"rows": [_cell_row("a", 1, True)], "cell": "a", "wall_s": 3.0},
        {"rows": [_cell_row("b", 1, False, anomalies={"lost-write": 2})], "cell": "b",
         "wall_s": 7.0},
        {"stopped": True, "cell": "a", "wall_s": 7.1}]}
    result = Result("m")
    record_race(result, answer, BASELINES)
    assert (result.outcome, result.kind, result.cell, result.seed, result.by) == (
        "killed", "safety", "b", 1, ["lost-write"])
    assert (result.seeds_run, result.wall_s) == (2, 7.5)


def test_in_a_race_a_time_out_ends_the_mutant_and_a_clean_race_leaves_it_alive() -> None:
    timed = Result("t")
    record_race(timed, {"wall_s": 90.0, "answers": [
        {"timeout": True, "cell": "b", "wall_s": 90.0}, {"stopped": True, "cell": "a"}]},
        BASELINES)
    assert (timed.outcome, timed.cell) == ("timed-out", "b")
    clean = Result("c")
    record_race(clean, {"wall_s": 9.0, "answers": [
        {"rows": [_cell_row("a", 1, True), _cell_row("b", 2, True)], "cell": "a"},
        {"rows": [_cell_row("b", 1, True), _cell_row("a", 2, True)], "cell": "b"}]}, BASELINES)
    assert (clean.outcome, clean.seeds_run) == ("alive", 4)


@pytest.mark.parametrize("text", ["0", "-1", "two"])
def test_lanes_must_be_a_positive_integer(text) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="positive integer"):
        lanes_option(text)


def _safe(name: str, time_limit: int) -> Cell:
    (safe,) = cells(argparse.Namespace(cell=["safe"],
                                       campaign=ROOT / "campaigns" / "validation.toml"))
    return Cell(name, replace(safe.config, time_limit=float(time_limit)))


def test_the_first_lane_to_kill_stops_the_other_lanes_child_mid_seed() -> None:
    """Two lanes: a 10 s cell and a 90 s one. The acks=all mutant dies at the short cell's
    seed 1 while the other child is still simulating its long seed: that child is killed
    (its answer is `stopped`), and no child of the race is left running."""
    short, long = _safe("short", 10), _safe("long", 90)
    baselines = {"short": {1: _row(1, True, acked=500)}, "long": {1: _row(1, True, acked=500)}}
    (task,) = race_tasks([HWM_MAX], [short, long], [1], baselines, lanes=2, block=1,
                         seed_timeout=120)
    answer = race_task(task)
    assert [a.get("stopped", False) for a in answer["answers"]] == [False, True]
    result = Result(HWM_MAX)
    record_race(result, answer, baselines)
    assert (result.outcome, result.kind, result.cell, result.seed) == ("killed", "safety",
                                                                      "short", 1)
    assert not CHILDREN._running


def test_a_race_runs_every_step_of_a_mutant_no_seed_tells_from_the_unmutated_code() -> None:
    """End to end (baseline first, then the race): the mutant whose runs are the unmutated
    code's survives after both cells' seeds, and the acks=all mutant is killed at a seed 1."""
    two = [_safe("a", 10), _safe("b", 12)]
    results = race_all([HWM_MAX, SAME_AS_UNMUTATED], two, [1, 2], local_runner(1), lanes=2,
                       block=1)
    same, killed = results[SAME_AS_UNMUTATED], results[HWM_MAX]
    assert (same.outcome, same.seeds_run, same.notes) == ("survived", 4, [])
    assert (killed.outcome, killed.kind, killed.seed) == ("killed", "safety", 1)
    assert (results[BASELINE].outcome, results[BASELINE].seeds_run) == ("survived", 4)
    # the lanes' counts of the changed code's runs are folded too: the command line's produce
    # never runs in a simulation (a coverage gap), the HWM line runs at the killing seed
    assert (same.reached, same.seeds_reached) == (0, 0)
    assert killed.reached > 0 and killed.seeds_reached == 1


def test_a_races_baseline_goes_to_its_own_runner_and_the_mutants_to_the_race() -> None:
    """`harness mutate --lanes` gives the baseline as many blocks at a time as the race has
    children: its blocks go to the baseline runner, the races to the other (each recorded)."""
    calls: dict[str, list[str]] = {"baseline": [], "race": []}

    def recording(name: str):
        def run(fn, tasks):
            calls[name].extend(f"{fn.__name__}:{t['mutant']}" for t in tasks)
            for t in tasks:
                if fn.__name__ == "search_task":
                    yield {"mutant": BASELINE, "cell": t["cell"], "wall_s": 1.0,
                           "rows": [_row(s, True) for s in t["seeds"]]}
                else:
                    yield {"mutant": t["mutant"], "wall_s": 2.0, "answers": [
                        {"rows": [_cell_row(c, s, True) for c, s in lane[0]], "cell": "a"}
                        for lane in t["lanes"]]}
        return run

    fast = typed(load_config("fast"))  # never simulated here: the runners are recordings
    two = [Cell("a", fast), Cell("b", fast)]
    results = race_all(["m"], two, [1, 2], recording("race"), lanes=2, block=2,
                       baseline_runner=recording("baseline"))
    assert calls == {"baseline": [f"search_task:{BASELINE}"] * 2, "race": ["race_task:m"]}
    assert (results["m"].outcome, results["m"].seeds_run) == ("survived", 4)
    assert (results[BASELINE].outcome, results[BASELINE].seeds_run) == ("survived", 4)
