"""The validation campaign's machinery: per-config fault mixes, time to detection, and the
shipped campaigns/validation.toml (pure logic: no cluster is started here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.campaign_spec import CampaignError, load_spec
from harness.config import typed
from harness.report.campaign_index import render_campaign
from harness.report.detection import EVIDENCE, WITH_INVARIANTS, detection_times, format_table
from nemesis.kinds import lookup
from nemesis.schedule import plan

ROOT = Path(__file__).resolve().parents[2]
TWO_MIXES = """
seeds = [1, 2]
time_limit = 5
[[config]]
name = "a"
expect = "no-loss"
nemesis = ["net"]
[[config]]
name = "b"
expect = "loss-allowed"
[[nemesis]]
name = "kill"
faults = ["kill"]
[[nemesis]]
name = "net"
faults = ["partition"]
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_a_config_runs_only_the_mixes_it_names(tmp_path: Path) -> None:
    _, cells = load_spec(_write(tmp_path, TWO_MIXES))
    assert [c.id for c in cells if c.config == "a"] == ["a/net/s1/t5", "a/net/s2/t5"]
    assert {c.nemesis for c in cells if c.config == "b"} == {"kill", "net"}
    assert all(c.resolved["nemesis"]["faults"] == ["partition"] for c in cells if c.config == "a")


@pytest.mark.parametrize("value, message", [
    ('["nope"]', "nemesis ['nope'] not defined"),
    ("[]", "nemesis must be a non-empty list"),
    ('"net"', "nemesis must be a non-empty list"),
    ('["net", "net"]', "nemesis must be a non-empty list"),
    ('[{}]', "nemesis must be a non-empty list"),  # not names: a clear error, no TypeError
])
def test_a_bad_per_config_nemesis_list_names_the_file_and_config(tmp_path: Path, value: str,
                                                                 message: str) -> None:
    path = _write(tmp_path, TWO_MIXES.replace('nemesis = ["net"]', f"nemesis = {value}"))
    with pytest.raises(CampaignError, match=r"c\.toml: config 'a': ") as err:
        load_spec(path)
    assert message in str(err.value)


def _cell(config: str, seed: int, lost: int | None, duration: float, status: str = "done",
          expect: str = "loss-allowed") -> dict:
    return {"config": config, "seed": seed, "lost": lost, "duration_s": duration,
            "status": status, "expect": expect, "nemesis": "m", "time_limit": 30,
            "id": f"{config}/m/s{seed}/t30", "outcome": None, "run_dir": None, "anomalies": {}}


def test_detection_time_sums_runs_until_one_loses_data_then_restarts() -> None:
    cells = [_cell("x", 1, 0, 100), _cell("x", 2, 5, 80), _cell("x", 3, 2, 90),
             _cell("x", 4, 0, 70), _cell("y", 1, 0, 60), _cell("y", 2, None, 10, "error"),
             _cell("y", 3, None, 0, "skipped"), _cell("safe", 1, 3, 50, expect="no-loss")]
    x, y = detection_times(cells)
    assert (x.config, x.runs, x.detecting_runs, x.samples_s) == ("x", 4, 2, [180.0, 90.0])
    assert (x.median_s, x.worst_s, x.undetected_s, x.seeds) == (135.0, 180.0, 70.0, [1, 2, 3, 4])
    assert (y.runs, y.samples_s, y.median_s, y.undetected_s) == (2, [], None, 70.0)
    table = format_table([x, y])
    assert "2/4" in table and "2m15s" in table and "3m00s" in table and "1m10s" in table


def test_evidence_measure_also_counts_committed_records_replaced_at_their_offset() -> None:
    replaced = {**_cell("z", 1, 0, 100), "anomalies": {"inconsistent-offsets": 31}}
    other = {**_cell("z", 2, 0, 50), "anomalies": {"stale-read": 3}}
    (strict,) = detection_times([replaced, other])
    (evidence,) = detection_times([replaced, other], EVIDENCE)
    assert (strict.detecting_runs, strict.undetected_s) == (0, 150.0)
    assert (evidence.detecting_runs, evidence.samples_s, evidence.undetected_s) == (1, [100.0], 50.0)


def test_invariant_measure_counts_any_protocol_invariant_and_nothing_else() -> None:
    violated = {**_cell("w", 1, 0, 100), "anomalies": {"invariant:LeaderCompleteness": 2}}
    zero = {**_cell("w", 2, 0, 40), "anomalies": {"invariant:LogMatching": 0}}
    other = {**_cell("w", 3, 0, 50), "anomalies": {"stale-read": 3, "invariants": 1}}
    cells = [violated, zero, other]
    (evidence,) = detection_times(cells, EVIDENCE)
    (invariants,) = detection_times(cells, WITH_INVARIANTS)
    assert (evidence.detecting_runs, evidence.undetected_s) == (0, 190.0)
    assert (invariants.detecting_runs, invariants.samples_s, invariants.undetected_s) == \
        (1, [100.0], 90.0)


def test_campaign_index_shows_the_detection_table(tmp_path: Path) -> None:
    folder = tmp_path / "campaigns" / "v" / "20260101T000000"
    folder.mkdir(parents=True)
    state = {"format": 1, "name": "v", "status": "finished", "verdict": "pass", "sessions": [],
             "cells": [_cell("no-elr", 1, 0, 100), _cell("no-elr", 2, 4, 50)]}
    (folder / "campaign.json").write_text(json.dumps(state))
    html = render_campaign(folder).read_text()
    assert "Time to detection" in html and "150 s" in html
    assert "a protocol invariant violated" in html


def test_shipped_validation_campaign_gives_each_weakness_its_own_mix() -> None:
    _, cells = load_spec(ROOT / "campaigns" / "validation.toml")
    configs = {c.config: c for c in cells}
    assert set(configs) == {"acks1", "unclean-election", "no-elr", "hwm-truncation",
                            "no-unclean-detection", "local-first-isr", "safe"}
    assert all(c.expect == ("no-loss" if c.config == "safe" else "loss-allowed") for c in cells)
    assert len({c.nemesis for c in cells}) > 3, "weaknesses need different fault mixes"
    weak = {name: c.resolved["system"] for name, c in configs.items()}
    assert configs["acks1"].resolved["workload"]["acks"] == "1"
    assert weak["unclean-election"]["unclean.leader.election.enable"] is True
    assert weak["no-elr"]["eligible.leader.replicas.enable"] is False
    assert weak["hwm-truncation"]["replica.truncation"] == "high-watermark"
    assert weak["no-unclean-detection"]["unclean.shutdown.detection"] is False
    assert weak["local-first-isr"]["isr.update"] == "local-first"


def test_safe_mix_never_takes_down_more_than_one_broker_lossily_at_once() -> None:
    """MinISR 2: the safe config is only promised to survive MinISR-1 lossy shutdowns at a time,
    so its mix must never plan an outage or a host fault aimed at several brokers."""
    _, cells = load_spec(ROOT / "campaigns" / "validation.toml")
    safe = [c for c in cells if c.config == "safe"]
    assert safe and all(c.resolved["system"]["min.insync.replicas"] == 2 for c in safe)
    assert "outage" not in safe[0].resolved["nemesis"]["faults"]
    multi = {"elr-members", "majority", "followers"}
    for cell in safe:
        for entry in plan(typed(cell.resolved).schedule_params):
            if lookup(entry["kind"]).family == "host":
                assert entry["target"].get("select") not in multi, entry


def _kip966_scenario():
    import importlib.util

    spec = importlib.util.spec_from_file_location("kip966_table",
                                                  ROOT / "benchmarks" / "kip966_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.scenario


@pytest.mark.parametrize("rf, min_isr", [(3, 2), (5, 3)])
def test_kip966_scenario_hits_exactly_k_isr_members_while_the_rest_are_stalled(
        rf: int, min_isr: int) -> None:
    scenario = _kip966_scenario()
    for k in range(1, min_isr + 1):
        pause, outage = scenario(rf, min_isr, k)
        stalled, hit = set(pause["target"]["fixed"]["nodes"]), outage["target"]["fixed"]["nodes"]
        assert len(hit) == k and len(stalled) == rf - min_isr and not stalled & set(hit)
        assert hit[0] == "n2", "broker 1, the preferred leader, is hit first"
        assert all(int(n[1:]) - 1 <= rf for n in [*stalled, *hit]), "only replicas are hit"
        assert pause["start_s"] < outage["start_s"] < pause["start_s"] + pause["duration_s"]
