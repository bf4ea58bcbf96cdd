"""nemesis.schedule: determinism, shape of plans, realised record and replay."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.config import KNOWN_FAULTS, load_config, typed
from nemesis.schedule import (
    LoadedSchedule,
    ScheduleParams,
    ScheduleRecord,
    load_schedule,
    plan,
    replay_plan,
)

ALL = tuple(KNOWN_FAULTS)


def params(**kw) -> ScheduleParams:
    base = {"seed": 1, "faults": ALL, "time_limit": 600, "interval": 10, "duration": 5,
            "partitions": 3, "brokers": 4}
    return ScheduleParams(**{**base, **kw})


def test_same_seed_same_schedule_different_seed_different():
    assert plan(params()) == plan(params())
    assert plan(params()) != plan(params(seed=2))


def test_plan_survives_json_round_trip_and_params_too():
    p = params(shrink_first=0.5, weights={"kill": 3.0})
    entries = plan(p)
    assert json.loads(json.dumps(entries)) == entries
    again = ScheduleParams.from_dict(json.loads(json.dumps(p.to_dict())))
    assert again == p and plan(again) == entries


def test_plan_is_identical_in_a_fresh_interpreter_with_another_hash_seed():
    code = ("import json; from nemesis.schedule import *; "
            "print(json.dumps(plan(ScheduleParams(seed=5, faults=('kill','partition','outage'),"
            "time_limit=300, interval=7, duration=3, partitions=2, brokers=3))))")
    outs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={"PYTHONHASHSEED": h}).stdout for h in ("1", "2")]
    assert outs[0] == outs[1]
    here = plan(ScheduleParams(seed=5, faults=("kill", "partition", "outage"), time_limit=300,
                               interval=7, duration=3, partitions=2, brokers=3))
    assert json.loads(outs[0]) == here


@pytest.mark.parametrize("seed", range(20))
def test_plan_invariants(seed):
    p = params(seed=seed, shrink_first=0.3)
    entries = plan(p)
    assert entries, "600 s with a 10 s interval must schedule faults"
    assert [e["id"] for e in entries] == list(range(len(entries)))
    starts = [e["start_s"] for e in entries]
    assert starts == sorted(starts)
    episodes_end = 0.0
    for e in entries:
        assert e["kind"] in KNOWN_FAULTS
        assert e["duration_s"] > 0 and e["start_s"] + e["duration_s"] <= p.time_limit + 1e-6
        t = e["target"]
        assert isinstance(t["pick"], int)
        if "partition" in t:
            assert 0 <= t["partition"] < p.partitions
        if e["kind"] == "outage":
            assert 2 <= t["count"] <= p.brokers
        elif e["kind"] == "partition":
            assert t["shape"] in ("isolate", "halves", "majority-ring", "bridge",
                                  "isolate-leader", "isolate-controller")
        else:
            assert t["select"] in ("leader", "random-broker", "controller", "majority",
                                   "last-isr-member", "elr-members", "followers")
        if "after" not in e:  # a new episode begins after the previous one ended
            assert e["start_s"] >= episodes_end
        episodes_end = max(episodes_end, e["start_s"] + e["duration_s"])


def test_only_listed_kinds_and_weights_bias_the_mix():
    entries = plan(params(faults=("kill", "pause"), weights={"kill": 9.0, "pause": 1.0},
                          time_limit=5000))
    kinds = [e["kind"] for e in entries]
    assert set(kinds) <= {"kill", "pause"}
    assert kinds.count("kill") > 3 * kinds.count("pause")
    assert {e["kind"] for e in plan(params(faults=("kill", "pause"),
                                           weights={"kill": 0.0}))} == {"pause"}


def test_shrink_first_pauses_followers_then_hits_last_isr_member():
    entries = plan(params(faults=("kill",), targets="leader", shrink_first=1.0,
                          shrink_wait=4.0))
    assert entries
    pauses = [e for e in entries if e["kind"] == "pause"]
    kills = [e for e in entries if e["kind"] == "kill"]
    assert len(pauses) == len(kills)
    for pause, kill in zip(pauses, kills, strict=True):
        assert pause["target"]["select"] == "followers"
        assert kill["target"] == {"select": "last-isr-member",
                                  "partition": pause["target"]["partition"],
                                  "pick": kill["target"]["pick"]}
        assert kill["after"] == pause["id"]
        assert kill["start_s"] == pytest.approx(pause["start_s"] + 4.0, abs=0.002)
        # the followers come back while the last ISR member is still down
        assert kill["start_s"] < pause["start_s"] + pause["duration_s"] \
            < kill["start_s"] + kill["duration_s"]


def test_targets_mode_restricts_selectors():
    for e in plan(params(faults=("kill", "partition"), targets="controller")):
        assert e["target"].get("select", e["target"].get("shape")) in (
            "controller", "isolate-controller")


def test_no_faults_no_schedule_and_short_runs_fit():
    assert plan(params(faults=())) == []
    for e in plan(params(time_limit=12, interval=1, duration=1)):
        assert e["start_s"] + e["duration_s"] <= 12


def test_schedule_params_use_lag_time_for_shrink_wait():
    c = load_config("fast", sets=["nemesis.shrink_first=0.5"])
    p = typed(c).schedule_params
    assert p.brokers == 4 and p.partitions == 3 and p.faults == ("kill", "partition")
    assert p.shrink_wait == pytest.approx(2000 * 1.5 / 1000 + 1)
    assert p.weights == c["nemesis"]["weights"] and p.interval == c["nemesis"]["interval"]


@pytest.mark.parametrize("bad", [{"faults": ("nuke",)}, {"targets": "all"}, {"interval": 0},
                                 {"shrink_first": 2}, {"brokers": 0}])
def test_bad_params_rejected(bad):
    with pytest.raises(ValueError):
        params(**bad)


def test_record_realised_schedule_and_replay(tmp_path):
    p = params(faults=("kill", "partition"), time_limit=60)
    path = tmp_path / "schedule.json"
    record = ScheduleRecord(path, p)
    entries = plan(p)
    assert len(entries) >= 3
    on_disk = json.loads(path.read_text())
    assert on_disk["format"] == 1 and len(on_disk["faults"]) == len(entries)
    assert all(f["outcome"] == "pending" for f in on_disk["faults"])

    record.started(0, {"nodes": ["n3"]}, 8.25)
    record.ended(0, 13.5)
    record.skipped(1, "no leader for partition 1")
    record.started(2, {"groups": [["n1", "n2"], ["n3", "n4", "n5"]]}, 30.0)
    record.finish()

    loaded = load_schedule(path)
    assert isinstance(loaded, LoadedSchedule) and loaded.params == p
    by_id = {f.id: f for f in loaded.faults}
    assert by_id[0].outcome == "ok" and by_id[0].resolved == {"nodes": ["n3"]}
    assert by_id[1].outcome == "skipped" and by_id[1].error == "no leader for partition 1"
    assert by_id[2].outcome == "interrupted" and by_id[2].ended_s is None
    assert all(by_id[i].outcome == "skipped" for i in by_id if i > 2)

    replay = replay_plan(loaded)
    assert [e["id"] for e in replay] == [0, 2]
    assert replay[0] == {"id": 0, "kind": entries[0]["kind"], "start_s": 8.25,
                         "duration_s": 5.25, "target": {"fixed": {"nodes": ["n3"]}}}
    assert replay[1]["duration_s"] == entries[2]["duration_s"]  # never ended: planned length
    symbolic = replay_plan(loaded, concrete=False)
    assert symbolic[0]["target"] == entries[0]["target"]


def test_a_record_saved_only_at_its_ends_finishes_with_the_same_file(tmp_path):
    """save_each_change=False (a simulated run's record) leaves the file as first written until
    finish(), which writes what a record saved at every change would hold by then."""
    p = params(faults=("kill", "partition"), time_limit=60)
    every = ScheduleRecord(tmp_path / "every.json", p)
    ends = ScheduleRecord(tmp_path / "ends.json", p, save_each_change=False)
    first = (tmp_path / "ends.json").read_bytes()
    assert first == (tmp_path / "every.json").read_bytes()
    for record in (every, ends):
        record.started(0, {"nodes": ["n3"]}, 8.25)
        record.ended(0, 13.5)
        record.skipped(1, "no leader for partition 1")
    assert (tmp_path / "ends.json").read_bytes() == first
    assert (tmp_path / "every.json").read_bytes() != first
    every.finish()
    ends.finish()
    assert (tmp_path / "ends.json").read_bytes() == (tmp_path / "every.json").read_bytes()
    assert load_schedule(tmp_path / "ends.json").faults[0].outcome == "ok"


def test_record_rejects_unknown_ids_and_outcomes(tmp_path):
    record = ScheduleRecord(tmp_path / "schedule.json", params(time_limit=60))
    with pytest.raises(KeyError):
        record.started(999, {}, 1.0)
    with pytest.raises(ValueError):
        record.ended(0, 1.0, outcome="great")


@pytest.mark.parametrize(("text", "match"), [
    ("{not json", "line 1"),
    ('{"format": 9}', "format"),
    ('{"format": 1, "params": {"seed": 1}}', "params"),
    ('{"format": 1, "params": {"seed": 1, "faults": ["kill"], "time_limit": 9, "interval": 1,'
     ' "duration": 1}, "faults": [{"id": 0}]}', r"faults\[0\]"),
])
def test_load_schedule_errors_name_file_and_entry(tmp_path, text, match):
    path = tmp_path / "schedule.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=match) as info:
        load_schedule(path)
    assert str(path) in str(info.value)
