"""One schedule on several systems (docs/differential.md): a minimal reproduction cast by role
onto the simulator, its safe twin, and a campaign across systems side by side."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_report import write_run_folder

from harness import cli
from harness.campaign import run_campaign
from harness.campaign_spec import CampaignError, load_spec
from harness.config import TestConfig, load_config, typed
from harness.minimal import load_minimal
from harness.report import report_path
from harness.report.differential import compare, format_comparison, table
from harness.reproduce import by_role, plan_file, room_for_waits, with_plan_faults
from harness.sim_run import as_simulated, simulate_into
from harness.store import create_run_dir
from harness.system_spec import on_system, parse_system, parse_systems
from harness.test import Plan, Test
from nemesis.schedule import load_schedule

REPO = Path(__file__).resolve().parents[2]
NO_ELR = REPO / "campaigns" / "minimal" / "no-elr.json"


def _runs(out: str) -> list[Path]:
    return [Path(line.split()[2]) for line in out.splitlines() if line.startswith("run ")]


def test_a_minimal_schedule_cast_by_role_reproduces_in_the_simulator(tmp_path, monkeypatch,
                                                                      capsys):
    monkeypatch.setenv("HARNESS_RESULTS", str(tmp_path))
    code = cli.main(["reproduce", "--schedule", str(NO_ELR), "--system", "sim"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "lost-write or unseen occurred in 1/1 sim run(s)" in out
    faults = load_schedule(_runs(out)[0] / "schedule.json").faults
    # the power loss was aimed at the last ISR member, and the mapping is recorded
    hit = next(f for f in faults if f.kind == "power-loss")
    assert hit.target["roles"] == {"nodes": ["last-isr-member"]}
    assert hit.roles[hit.resolved["nodes"][0]] == "last-isr-member"
    # `harness run --plan` of this run's schedule.json casts the same faults by role again
    again = plan_file(_runs(out)[0] / "schedule.json")
    assert [e["target"]["roles"] for e in again] == [
        {"nodes": ["isr-follower#1", "isr-follower#2"]}, {"nodes": ["last-isr-member"]}]


def test_a_fault_waiting_for_the_last_isr_member_stretches_its_episode(tmp_path):
    """The power loss is moved to 0.2 s after the pause, before the ISR can have shrunk: it
    waits for the last ISR member, and the pause it comes after is healed as much later."""
    _, _, doc = load_minimal(NO_ELR)
    entries = by_role(doc, NO_ELR)
    pause, hit = entries
    hit["start_s"] = pause["start_s"] + 0.2
    config, _ = room_for_waits(as_simulated(doc["config"]), entries)
    test = Test.of(config, tmp_path, plan=Plan.scripted(entries))
    simulate_into(test, tmp_path, keep_going=True)
    paused, lost = load_schedule(tmp_path / "schedule.json").faults
    waited = lost.started_s - hit["start_s"]
    assert waited > 0.5 and lost.roles[lost.resolved["nodes"][0]] == "last-isr-member"
    planned_end = pause["start_s"] + pause["duration_s"]
    assert paused.ended_s >= planned_end + waited - 0.3, (paused, lost)


def test_the_same_schedule_loses_nothing_with_elr(tmp_path, monkeypatch, capsys):
    """The must-fail twin: the schedule is the same, the weakness is switched off."""
    monkeypatch.setenv("HARNESS_RESULTS", str(tmp_path))
    code = cli.main(["reproduce", "--schedule", str(NO_ELR), "--system", "sim",
                     "--set", "system.eligible.leader.replicas.enable=true"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "lost-write or unseen occurred in 0/1 sim run(s)" in out


@pytest.mark.parametrize("argv, message", [
    (["--system", "kafka:0.8"], "unknown Kafka version"),
    (["--system", "zookeeper"], "unknown system"),
])
def test_a_bad_system_is_one_line_and_exit_3(argv, message, capsys):
    code = cli.main(["reproduce", "--schedule", str(NO_ELR), *argv])
    err = capsys.readouterr().err
    assert code == 3 and message in err and "Traceback" not in err


def test_moving_a_config_onto_kafka_resets_weakness_switches_and_says_so():
    config = json.loads((REPO / "campaigns/minimal/hwm-truncation.json").read_text())["config"]
    moved, notes = on_system(config, parse_system("kafka:3.9.1"))
    assert moved["system"]["kind"] == "kafka" and moved["kafka"]["version"] == "3.9.1"
    assert moved["system"]["replica.truncation"] == "leader-epoch"
    assert moved["hosts"]["provider"] == "netns"
    assert any("replica.truncation" in n for n in notes)
    assert "stale-read" in moved["checker"]["allow"]  # Kafka's reads of a deposed leader
    kept, none = on_system(config, parse_system("sim"))
    assert kept["system"]["replica.truncation"] == "high-watermark" and not none


CAMPAIGN = """
name = "across"
seeds = [1, 2]
time_limit = 10
systems = ["sim", "kafka:4.2.1"]
[set]
nodes = 4
[[config]]
name = "hwm"
expect = "loss-allowed"
set = { "system.replica.truncation" = "high-watermark" }
[[nemesis]]
name = "kill"
faults = ["kill"]
interval = 3
"""


def test_a_campaign_across_systems_runs_each_cell_on_each(tmp_path):
    path = tmp_path / "across.toml"
    path.write_text(CAMPAIGN)
    _, cells = load_spec(path)
    assert [c.id for c in cells] == ["hwm/kill/s1/t10@sim", "hwm/kill/s1/t10@kafka:4.2.1",
                                     "hwm/kill/s2/t10@sim", "hwm/kill/s2/t10@kafka:4.2.1"]
    sim, kafka = cells[0], cells[1]
    assert sim.expect == "loss-allowed" and sim.resolved["hosts"]["provider"] == "sim"
    # Kafka has no high-watermark truncation: there the schedule must lose nothing
    assert kafka.expect == "no-loss" and kafka.notes
    _, only_sim = load_spec(path, systems=parse_systems("sim"))
    assert len(only_sim) == 2


def test_a_campaign_with_an_unknown_system_names_the_file(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(CAMPAIGN.replace('"kafka:4.2.1"', '"kafka:9.9.9"'))
    with pytest.raises(CampaignError, match=r"bad.toml: systems: unknown Kafka version"):
        load_spec(path)


def losing_on_sim(config: TestConfig, results_root: Path) -> Path:
    """A run folder that lost records on the simulator only (see write_run_folder)."""
    run_dir = create_run_dir(results_root, config.name, config.seed)
    write_run_folder(run_dir, seed=config.seed, sends=300, name=config.name,
                     lose=config.hosts.provider == "sim")
    report_path(run_dir)
    return run_dir


def test_the_campaign_page_shows_systems_side_by_side_and_each_disagreement(tmp_path, capsys):
    path = tmp_path / "across.toml"
    path.write_text(CAMPAIGN)
    folder = run_campaign(path, run_test=losing_on_sim, results_root=tmp_path / "results")
    out = capsys.readouterr().out
    assert "hwm/kill/s1/t10: loses on sim; not on kafka:4.2.1" in out
    state = json.loads((folder / "campaign.json").read_text())
    groups = compare(folder, state["cells"])
    assert [g.disagreement for g in groups] == ["loses on sim; not on kafka:4.2.1"] * 2
    rows = {(r.config, r.system): (r.losing, r.runs) for r in table(groups)}
    assert rows == {("hwm", "sim"): (2, 2), ("hwm", "kafka:4.2.1"): (0, 2)}
    assert "2/2" in format_comparison(groups)
    page = (folder / "index.html").read_text()
    assert "Systems side by side" in page and "hwm @ kafka:4.2.1" in page
    assert page.count("loses on sim; not on kafka:4.2.1") == 2


def _hit(run_dir: Path, kind: str):
    return next(f for f in load_schedule(run_dir / "schedule.json").faults if f.kind == kind)


@pytest.mark.netns
@pytest.mark.fuse
def test_run_with_a_plan_casts_the_minimal_schedule_on_real_hosts(tmp_path, monkeypatch, capsys):
    """The no-elr reproduction by role on the embedded system's real nodes: the power loss
    waits for (and hits) whoever is the last ISR member there, and the records go."""
    monkeypatch.setenv("HARNESS_RESULTS", str(tmp_path))
    code = cli.main(["run", "--config", "fast", "--nodes", "4", "--time-limit", "8",
                     "--set", "system.eligible.leader.replicas.enable=false",
                     "--set", "workload.producers=1", "--set", "workload.rate=4",
                     "--set", "topic.partitions=1", "--plan", str(NO_ELR)])
    out = capsys.readouterr().out
    run_dir = Path(out.strip().splitlines()[-1]).parent
    hit = _hit(run_dir, "power-loss")
    assert hit.roles[hit.resolved["nodes"][0]] == "last-isr-member", hit
    pause = _hit(run_dir, "pause")
    assert sorted(pause.roles[n] for n in pause.resolved["nodes"]) == [
        "isr-follower#1", "isr-follower#2"]
    assert code == 1, out  # lost-write: the last replica standing came back empty


@pytest.mark.slow
@pytest.mark.netns
@pytest.mark.fuse
def test_the_models_no_elr_schedule_loses_records_on_kafka_3_9(tmp_path, monkeypatch, capsys):
    """docs/differential.md: the simulator's two-fault schedule, cast by role on Kafka 3.9.1
    (no ELR), loses the records the last ISR member had not flushed (10 of 10 runs here)."""
    monkeypatch.setenv("HARNESS_RESULTS", str(tmp_path))
    code = cli.main(["reproduce", "--schedule", str(NO_ELR), "--system", "kafka:3.9.1"])
    out = capsys.readouterr().out
    assert code == 0 and "lost-write or unseen occurred in 1/1 kafka:3.9.1 run(s)" in out, out
    hit = _hit(_runs(out)[0], "power-loss")
    assert hit.roles[hit.resolved["nodes"][0]] == "last-isr-member"


def test_a_plan_run_lists_the_kinds_it_holds_and_makes_room_for_its_waits(capsys):
    """`harness run --plan`: nemesis.faults becomes the plan's kinds (what the hosts must be
    prepared for), and the time limit grows by what its faults may wait for a role."""
    _, _, doc = load_minimal(NO_ELR)
    config = load_config("fast", ["nemesis.faults=['kill']"])
    out = with_plan_faults(config, by_role(doc, NO_ELR), "no-elr.json")
    said = capsys.readouterr().out
    assert typed(out).nemesis.faults == ("pause", "power-loss")
    assert "nemesis.faults = ['pause', 'power-loss'] (the kinds no-elr.json holds)" in said
    assert typed(out).time_limit > typed(config).time_limit and "time_limit" in said
