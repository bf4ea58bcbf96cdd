"""harness mutate (docs/mutation.md): the mutator's operators and ids, how a task's answer
becomes a mutant's outcome, the score table, and end to end: a mutant known to break
acks=all (the high watermark taken as the max of the ISR's log ends) is killed by the
simulated search at its first seed, while the unmutated code, searched beside it, is not.
The differential oracle and the stable ids have tests of their own (test_mutate_oracle.py,
test_mutate_ids.py)."""

from __future__ import annotations

import argparse
import hashlib
from dataclasses import replace
from pathlib import Path

import pytest

from harness.commands.mutate import cells, sample
from harness.config import TestConfig
from harness.mutate import page
from harness.mutate.child import ROOT
from harness.mutate.mutants import changed_lines, mutant, mutants_of, mutants_of_source, parse_id
from harness.mutate.score import (
    BASELINE,
    Cell,
    Result,
    _record,
    child_job,
    local_runner,
    search_all,
    settle,
)

SNIPPET = '''\
"""A module docstring."""
LIMIT = 3


def f(a, b, xs):
    """A docstring, never mutated."""
    print("a log line, never dropped")
    if a < b and b in xs:
        a = a + 1
    n = min(a, b)
    return a == b


class C:
    def __init__(self):
        self.x = 0
'''


def _changed(m) -> tuple[str, str]:
    """The one line a mutant changes: (before, after)."""
    before, after = m.original.splitlines(), m.source.splitlines()
    (i,) = [i for i, (x, y) in enumerate(zip(before, after, strict=True)) if x != y]
    return before[i].strip(), after[i].strip()


def test_each_operator_makes_its_change_on_one_line_in_id_order() -> None:
    """Nothing outside functions, in __init__, in docstrings or log lines is mutated."""
    found = [(m.place, *_changed(m)) for m in mutants_of_source("m.py", SNIPPET)]
    cond, body, low, ret = ("if a < b and b in xs:", "a = a + 1", "n = min(a, b)",
                            "return a == b")
    assert found == [
        ("m.py:negate-cond:8:4:0", cond, "if not (a < b and b in xs):"),
        ("m.py:and-or:8:7:0", cond, "if a < b or b in xs:"),
        ("m.py:cmp-boundary:8:7:0", cond, "if a <= b and b in xs:"),
        ("m.py:cmp-negate:8:7:0", cond, "if a >= b and b in xs:"),
        ("m.py:cmp-negate:8:17:0", cond, "if a < b and b not in xs:"),
        ("m.py:drop-stmt:9:8:0", body, "pass"),
        ("m.py:arith-swap:9:12:0", body, "a = a - 1"),
        ("m.py:off-by-one:9:12:0", body, "a = a + 2"),
        ("m.py:off-by-one:9:12:1", body, "a = a + 0"),
        ("m.py:drop-stmt:10:4:0", low, "pass"),
        ("m.py:min-max:10:8:0", low, "n = max(a, b)"),
        ("m.py:return-value:11:4:0", ret, "return not (a == b)"),
        ("m.py:cmp-negate:11:11:0", ret, "return a != b"),
    ]


def test_ids_name_the_place_and_rebuild_the_same_mutant(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(SNIPPET)
    first = mutants_of(tmp_path, "pkg/m.py")
    assert [m.id for m in first] == [m.id for m in mutants_of(tmp_path, "pkg/m.py")]
    assert len({m.id for m in first}) == len(first)
    chosen = next(m for m in first if m.operator == "min-max")
    assert chosen.place == "pkg/m.py:min-max:10:8:0"
    assert chosen.id.startswith("pkg/m.py:f:min-max:") and chosen.id.endswith(":0")
    assert parse_id(chosen.place) == ("pkg/m.py", "min-max", 10, 8, 0)
    assert mutant(tmp_path, chosen.id) == chosen == mutant(tmp_path, chosen.place)
    assert chosen.module == "pkg.m"
    changed = [line for line in chosen.diff().splitlines()[2:] if line[:1] in "+-"]
    assert changed == ["-    n = min(a, b)", "+    n = max(a, b)"]
    with pytest.raises(ValueError, match="no such mutant"):
        mutant(tmp_path, "pkg/m.py:min-max:11:8:0")
    with pytest.raises(ValueError, match="no such mutant"):
        mutant(tmp_path, "pkg/m.py:f:min-max:00000000:0")


def test_nested_nodes_at_one_place_get_distinct_indexes_and_columns_count_bytes() -> None:
    source = 'def g(a, b, c):\n    s = "é"; return a + 1 + 2 if a and b or c else s\n'
    ms = mutants_of_source("m.py", source)
    ids = [m.id for m in ms]
    assert len(set(ids)) == len(ids)
    shifted = [m.source.splitlines()[1] for m in ms if m.operator == "off-by-one"]
    assert shifted == ['    s = "é"; return a + 1 + 3 if a and b or c else s',
                       '    s = "é"; return a + 1 + 1 if a and b or c else s',
                       '    s = "é"; return a + 2 + 2 if a and b or c else s',
                       '    s = "é"; return a + 0 + 2 if a and b or c else s']


def _answer(rows: list[dict], **extra) -> dict:
    return {"rows": rows, "cell": "safe", "wall_s": 2.0, **extra}


def _row(seed: int, valid, acked: int = 100, anomalies=None, error=None) -> dict:
    return {"seed": seed, "valid": valid, "acked": acked, "anomalies": anomalies or {},
            "error": error, "lost": 0}


CLEAN = {s: _row(s, True) for s in (1, 2)}  # a baseline whose seeds both served and were valid


@pytest.mark.parametrize(("rows", "outcome", "kind", "by"), [
    ([_row(1, True), _row(2, False, anomalies={"lost-write": 3})], "killed", "safety",
     ["lost-write"]),
    ([_row(1, True), _row(2, "error", error="KeyError: 3")], "killed", "liveness",
     ["error: KeyError (baseline valid)"]),
    ([_row(1, "unknown", acked=0)], "killed", "liveness",
     ["nothing acknowledged (baseline valid)"]),
    ([_row(1, False, acked=0, anomalies={"invariant:LeaderCompleteness": 1})], "killed",
     "safety", ["invariant:LeaderCompleteness"]),
    ([_row(1, True), _row(2, True)], "alive", None, []),
    ([_row(1, "unknown"), _row(2, True)], "killed", "liveness",
     ["unknown verdict (baseline valid)"]),
])
def test_a_blocks_answer_is_judged_against_the_baselines_same_seeds(rows, outcome, kind,
                                                                      by) -> None:
    result = Result("m")
    _record(result, _answer(rows), CLEAN)
    assert (result.outcome, result.kind, result.by) == (outcome, kind, by)


def _lossy(seed: int, lost: int, **anomalies) -> dict:
    return {**_row(seed, False, acked=5000, anomalies={"lost-write": lost, **anomalies}),
            "lost": lost}


LOSSY = {s: _lossy(s, 500) for s in (1, 2)}  # a baseline that loses 500 records at both seeds


def test_a_loss_excess_kills_only_once_no_later_seed_gives_a_safety_kill() -> None:
    """The first loss excess is kept, the search goes on, and a later safety kill takes its
    place (it counts in the safety score); with none, the mutant is killed by the excess."""
    excess_then_new_kind = Result("a")
    _record(excess_then_new_kind, _answer([_lossy(1, 900), _lossy(2, 500, **{"stale-read": 1})]),
            LOSSY)
    assert (excess_then_new_kind.outcome, excess_then_new_kind.kind,
            excess_then_new_kind.seed) == ("killed", "safety", 2)
    excess_only = Result("b")
    _record(excess_only, _answer([_lossy(1, 900), _lossy(2, 1000)]), LOSSY)
    assert (excess_only.outcome, excess_only.kind, excess_only.seed) == ("alive", "loss-excess", 1)
    settle(excess_only)
    assert excess_only.outcome == "killed"
    within = Result("c")  # its twin: 1.4 times the baseline's loss is no excess
    _record(within, _answer([_lossy(1, 700), _lossy(2, 700)]), LOSSY)
    settle(within)
    assert (within.outcome, within.kind) == ("survived", None)


def test_the_child_stops_by_the_parents_rule_so_it_gets_the_cells_kinds() -> None:
    """A child judging with no cell kinds stopped at a lossy seed's `unseen`, which the parent,
    knowing the baseline shows it elsewhere in the cell, did not call a kill: the mutant then
    "survived" on 1 seed of 5."""
    task = {"mutant": "m", "cell": "safe", "config": {}, "seeds": [1], "timeout": 9,
            "baseline": {"1": _row(1, False)}, "cell_kinds": ["unseen"]}
    assert child_job(task)["cell_kinds"] == ["unseen"]
    assert child_job({**task, "mutant": BASELINE})["mutant"] is None


def test_a_timeout_or_a_module_that_does_not_import_is_not_a_kill() -> None:
    timed, broken = Result("a"), Result("b")
    _record(timed, {"timeout": True, "cell": "safe", "wall_s": 50.0}, CLEAN)
    _record(broken, {"error": "SyntaxError: ...", "cell": "safe", "wall_s": 1.0}, CLEAN)
    assert (timed.outcome, broken.outcome) == ("timed-out", "crashed")


def test_the_safety_score_counts_neither_crashes_liveness_kills_nor_equivalent_mutants() -> None:
    results = {i: Result(i, outcome=o, kind=k) for i, o, k in [
        (BASELINE, "survived", None), ("x.py:drop-stmt:1:0:0", "killed", "safety"),
        ("x.py:drop-stmt:2:0:0", "survived", None), ("x.py:drop-stmt:3:0:0", "survived", None),
        ("x.py:drop-stmt:4:0:0", "crashed", None), ("x.py:drop-stmt:5:0:0", "killed", "liveness"),
        ("x.py:drop-stmt:6:0:0", "killed", "loss-excess")]}
    results["x.py:drop-stmt:3:0:0"].unit = "killed"
    hand = {"x.py:drop-stmt:2:0:0": {"verdict": "equivalent", "why": "a cache"}}
    row, total = page.score_table(results, hand)
    assert row == total | {"module": "x.py"}
    assert (row["safety kills"], row["loss-excess kills"], row["liveness kills"],
            row["killed only by unit tests"], row["equivalent or safe"],
            row["survived both"]) == (1, 1, 1, 1, 1, 0)
    # the loss-excess kill is no anomaly kill: counted, not a kill in the safety score
    assert (row["safety score"], row["score with loss-excess kills"],
            row["score with liveness kills"]) == ("1/3 = 33%", "2/3 = 67%", "3/4 = 75%")


def test_a_loss_excess_kill_classified_safe_by_hand_is_not_counted() -> None:
    """The loss-excess rule's kill of a mutant shown by hand to change no safety property was
    a false alarm: the mutant leaves the count as a classified survivor does. Unclassified (or
    classified missed) it stays counted, as above."""
    results = {i: Result(i, outcome=o, kind=k) for i, o, k in [
        (BASELINE, "survived", None), ("x.py:drop-stmt:1:0:0", "killed", "safety"),
        ("x.py:drop-stmt:2:0:0", "killed", "loss-excess"),
        ("x.py:drop-stmt:3:0:0", "killed", "loss-excess")]}
    hand = {"x.py:drop-stmt:2:0:0": {"verdict": "safe", "why": "timing only"},
            "x.py:drop-stmt:3:0:0": {"verdict": "missed", "why": "a real loss"}}
    (row, _) = page.score_table(results, hand)
    assert (row["loss-excess kills"], row["equivalent or safe"]) == (1, 1)
    assert (row["safety score"], row["score with loss-excess kills"]) == ("1/2 = 50%", "2/2 = 100%")
    (row, _) = page.score_table(results, {})
    assert (row["loss-excess kills"], row["safety score"]) == (2, "1/3 = 33%")


def test_a_safety_kill_classified_safe_by_hand_is_a_false_alarm() -> None:
    """A safety kill whose run, read, showed the cell's own loss on a moved schedule (the
    client mutant at flush-time/restart-power seed 8, docs/mutation.md): out of the count and
    shown as a false alarm; its twin, unclassified, stays a kill."""
    results = {i: Result(i, outcome=o, kind=k) for i, o, k in [
        (BASELINE, "survived", None), ("x.py:drop-stmt:1:0:0", "killed", "safety"),
        ("x.py:drop-stmt:2:0:0", "killed", "safety")]}
    hand = {"x.py:drop-stmt:2:0:0": {"verdict": "safe", "why": "timing only", "false_alarm": True}}
    (row, _) = page.score_table(results, hand)
    assert (row["safety kills"], row["false alarms"], row["safety score"]) == (1, 1, "1/1 = 100%")
    # a verdict written while the mutant survived, before the kill: the kill stands
    hand = {"x.py:drop-stmt:2:0:0": {"verdict": "safe", "why": "liveness only"}}
    (row, _) = page.score_table(results, hand)
    assert (row["safety kills"], row["false alarms"], row["safety score"]) == (2, 0, "2/2 = 100%")
    (row, _) = page.score_table(results, {})
    assert (row["safety kills"], row["false alarms"], row["safety score"]) == (2, 0, "2/2 = 100%")


def test_a_sample_spreads_over_the_modules_and_depends_only_on_its_seed() -> None:
    per_module = {p: mutants_of(ROOT, p) for p in ("replication/metadata.py",
                                                   "replication/broker_store.py")}
    drawn = sample(per_module, 6, seed=1)
    assert [m.path for m in drawn].count("replication/metadata.py") == 3
    assert [m.id for m in drawn] == [m.id for m in sample(per_module, 6, seed=1)]
    assert [m.id for m in drawn] != [m.id for m in sample(per_module, 6, seed=2)]


def _hwm_max() -> str:
    """The mutant that makes the HWM the max of the ISR's ends, found by what it changes: its
    line moves with every edit of partition.py."""
    found = [m.id for m in mutants_of(ROOT, "replication/partition.py")
             if m.operator == "min-max" and "max([settled if r == me" in m.source]
    assert len(found) == 1, found
    return found[0]


HWM_MAX = _hwm_max()


def test_a_mutant_that_breaks_acks_all_is_killed_and_the_unmutated_code_is_not() -> None:
    source = ROOT / "replication" / "partition.py"
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    safe = cells(argparse.Namespace(cell=["safe"], campaign=ROOT / "campaigns" / "validation.toml"))
    cell = Cell("safe", replace(safe[0].config, time_limit=10.0))
    results = search_all([HWM_MAX], [cell], [1, 2], local_runner(2), block=2)
    killed, baseline = results[HWM_MAX], results[BASELINE]
    assert (killed.outcome, killed.kind, killed.seed) == ("killed", "safety", 1)
    assert "lost-write" in killed.by and "invariant:LeaderCompleteness" in killed.by
    assert (baseline.outcome, baseline.seeds_run, baseline.notes) == ("survived", 2, [])
    assert killed.reached > 0 and killed.seeds_reached == 1 and baseline.reached is None
    assert hashlib.sha256(source.read_bytes()).hexdigest() == digest  # the checkout untouched


# metadata.fence's pre-KIP-966 branch with `state.leader != broker` negated: a fenced last ISR
# member that leads keeps leading (a stable id: edits of other lines leave it; `--show` it)
PRE_KIP966_FENCED_LEADER_KEPT = "replication/metadata.py:fence:cmp-negate:50ed0306:0"


def test_the_pre_kip966_fence_mutant_is_killed_where_the_unmutated_code_is_silent() -> None:
    """The no-elr cell runs the controller without KIP-966: ValidControllerState's pre-KIP-966
    form lets the last replica standing stay fenced in a leaderless ISR (the unmutated code
    does so at most seeds) and kills the mutant that keeps it leading."""
    mutant_id = PRE_KIP966_FENCED_LEADER_KEPT
    assert "+        if state.leader == broker:" in mutant(ROOT, mutant_id).diff()
    no_elr = cells(argparse.Namespace(cell=["no-elr/partition-power"],
                                      campaign=ROOT / "campaigns" / "mutation.toml"))
    results = search_all([mutant_id], [no_elr[0]], [1, 2], local_runner(2), block=2)
    killed, baseline = results[mutant_id], results[BASELINE]
    assert (killed.outcome, killed.kind, killed.seed) == ("killed", "safety", 1)
    assert killed.by == ["invariant:ValidControllerState"]
    assert (baseline.outcome, baseline.seeds_run, baseline.notes) == ("survived", 2, [])
    # the must-fail twin of test_mutate_probe.py's end-to-end run, where this branch never
    # runs in the safe cell (count 0): without KIP-966 it runs, and the probe counts it
    assert killed.reached > 0 and killed.seeds_reached == 1


def test_the_mutation_campaigns_safe_cell_is_the_validation_campaigns() -> None:
    def cell(campaign: str, name: str) -> TestConfig:
        args = argparse.Namespace(cell=[name], campaign=ROOT / "campaigns" / campaign)
        return replace(cells(args)[0].config, name="")

    assert cell("mutation.toml", "safe/safe-mix") == cell("validation.toml", "safe")
    assert cell("mutation.toml", "safe/reach").nemesis.faults != \
        cell("validation.toml", "safe").nemesis.faults


@pytest.mark.parametrize("name, key, value", [
    ("flush-count/power", "flush.messages", 1), ("flush-time/power", "flush.ms", 5),
    ("flush-time/restart-power", "flush.ms", 5), ("small-segments/power", "segment.bytes", 4096),
])
def test_the_gap_closing_cells_are_the_safe_configuration_with_one_setting_more(name, key,
                                                                                 value) -> None:
    """A kill in these cells is a mutant the safe configuration would lose records through
    once a flush policy or small segments make its code run, not another configuration's."""
    def cell(which: str) -> dict:
        args = argparse.Namespace(cell=[which], campaign=ROOT / "campaigns" / "mutation.toml")
        return cells(args)[0].config.record()  # compared as the dicts test.json holds

    base, gap = cell("safe/power"), cell(name)
    assert gap["system"] == {**base["system"], key: value}
    assert {k: v for k, v in gap.items() if k not in ("system", "name", "nemesis")} == \
        {k: v for k, v in base.items() if k not in ("system", "name", "nemesis")}


def test_the_no_elr_cell_is_the_flush_count_one_under_the_rules_before_kip_966() -> None:
    def cell(which: str) -> dict:
        args = argparse.Namespace(cell=[which], campaign=ROOT / "campaigns" / "mutation.toml")
        return cells(args)[0].config.record()  # compared as the dicts test.json holds

    base, gap = cell("flush-count/power"), cell("no-elr/power")
    assert gap["system"] == {**base["system"], "eligible.leader.replicas.enable": False}
    assert {k: v for k, v in gap.items() if k not in ("system", "name")} == \
        {k: v for k, v in base.items() if k not in ("system", "name")}


def test_every_hand_classified_survivor_is_a_mutant_that_still_makes_its_recorded_change() -> None:
    hand = page.classified(ROOT / "campaigns" / "mutation-survivors.toml")
    assert hand, "the classification file is empty or gone"
    for mutant_id, note in hand.items():
        m = mutant(ROOT, mutant_id)
        assert m.id == mutant_id, "classified by a stable id"
        assert changed_lines(m.diff()) == note["change"], mutant_id
        assert note["verdict"] in ("equivalent", "safe", "missed") and note["why"]
        assert note["verdict"] != "missed" or note["lacked"]


def test_harness_mutate_shows_a_mutant_by_its_id_and_refuses_an_unknown_one(capsys) -> None:
    from harness.cli import main

    assert main(["mutate", "--show", HWM_MAX]) == 0
    assert "+        candidate = max([settled if r == me" in capsys.readouterr().out
    assert main(["mutate", "--show", "replication/partition.py:min-max:1:0:0"]) == 3
    assert "no such mutant" in capsys.readouterr().err
    assert main(["mutate", "--show", "replication/partition.py:nothing"]) == 3
    assert "not a mutant id" in capsys.readouterr().err


def test_a_later_campaigns_result_replaces_an_earlier_one_and_keeps_its_unit_tests() -> None:
    from harness.commands.mutate import _merged

    earlier = Result("m", outcome="survived", unit="killed", unit_failed=["t"])
    later = _merged(earlier, Result("m", outcome="killed", cell="safe/reach", seed=3))
    assert (later.outcome, later.cell, later.unit, later.unit_failed) == \
        ("killed", "safe/reach", "killed", ["t"])


def test_a_kill_stands_against_a_later_survival_of_other_cells_only() -> None:
    """A campaign over new cells does not undo a kill of an earlier one's cell; one that ran
    that cell again (a changed rule) does, and so does one whose cells are not known."""
    from harness.commands.mutate import _merged

    def kill() -> Result:
        return Result("m", outcome="killed", kind="safety", cell="safe/power", seed=3)

    later = Result("m", outcome="survived", unit="killed", unit_failed=["t"])
    kept = _merged(kill(), later, ["flush-time/restart-power"])
    assert (kept.outcome, kept.cell, kept.unit, kept.unit_failed) == \
        ("killed", "safe/power", "killed", ["t"])
    assert _merged(kill(), later, ["safe/safe-mix", "safe/power"]).outcome == "survived"
    assert _merged(kill(), later, None).outcome == "survived"


def test_a_kill_saved_before_kills_had_a_kind_gets_one_on_rescore() -> None:
    from harness.commands.mutate import _older

    stalled = _older(Result("a", outcome="killed", by=["nothing acknowledged"]))
    lossy = _older(Result("b", outcome="killed", by=["lost-write"]))
    assert (stalled.kind, lossy.kind) == ("liveness", "safety")


def test_a_campaign_cut_short_is_rescored_from_its_progress(tmp_path: Path) -> None:
    import json
    from dataclasses import asdict

    from harness.commands.mutate import _saved

    first, later = Result(HWM_MAX, outcome="timed-out"), Result(HWM_MAX, outcome="killed")
    (tmp_path / "progress.jsonl").write_text(
        "".join(json.dumps(asdict(r)) + "\n" for r in (first, later)))
    saved = _saved(tmp_path)
    assert [r["outcome"] for r in saved["results"]] == ["killed"]  # the last line of each
    assert list(saved["diffs"]) == [HWM_MAX]


def test_a_rescore_leaves_out_a_mutant_whose_code_is_gone(tmp_path: Path, capsys) -> None:
    """A campaign rescored after the function it mutated was deleted: that result is left
    out of the score, with a warning, instead of the whole rescore failing."""
    from harness.commands.mutate import _still_made

    gone = "replication/log.py:Log.no_such_function:drop-stmt:00000000:0"
    diffs = {HWM_MAX: mutant(ROOT, HWM_MAX).diff(), gone: "-x = 1\n+pass\n"}
    now, left_out = _still_made(tmp_path, diffs)
    assert list(now) == [HWM_MAX] and left_out == {gone}
    assert "its result is left out" in capsys.readouterr().err
