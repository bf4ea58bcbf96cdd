"""Issue 15, reports that tell what happened: loss incidents, timeline.html, lag/unseen plots,
and the nightly comparison of a campaign with its earlier nights.

`acks1_run` is test_report's simulated run (acks=1, broker 1 killed at 3-5 s) with the
forensic columns computed by the checker's own code (checkers.forensics.explain) from an
events.jsonl where broker 1 truncates exactly the records it acknowledged alone.
"""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_report import KILL, PARTITION_FAULT, write_run_folder

from checkers.forensics import Fault, explain, load_events
from harness.commands import campaign as campaign_command
from harness.report import report_path
from harness.report.campaign_index import render_campaign
from harness.report.nightly import compare_nights, format_summary, wilson


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


def acks1_run(run_dir: Path) -> Path:
    run = write_run_folder(run_dir, lose=True)
    lost = pq.read_table(run / "loss.parquet").to_pylist()
    offsets = sorted(r["offset"] for r in lost)
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    for e in events:
        if e["kind"] == "truncate":
            e.update(to_offset=offsets[0], from_offset=offsets[-1] + 1,
                     removed=offsets[-1] + 1 - offsets[0])
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    by_part = load_events(run / "events.jsonl", "chaos", [])
    faults = [Fault("kill", "n2", *KILL), Fault("partition", "n3", *PARTITION_FAULT)]
    rows = []
    for r in lost:
        r = {k: v for k, v in r.items() if k in ("value", "partition", "offset", "ack_time",
                                                   "node", "epoch", "kind")}
        r.update(explain(r, faults, by_part.get(r["partition"], []), []))
        rows.append(r)
    pq.write_table(pa.Table.from_pylist(rows), run / "loss.parquet")
    return run


@pytest.fixture(scope="module")
def acks1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = acks1_run(tmp_path_factory.mktemp("story") / "acks1" / "20260101T000000-s0")
    report_path(run)
    return run


def test_acks1_loss_is_one_incident_with_a_story(acks1: Path) -> None:
    lost = pq.read_table(acks1 / "loss.parquet").to_pylist()
    first, last = min(r["offset"] for r in lost), max(r["offset"] for r in lost)
    html = (acks1 / "report.html").read_text()
    text = _text(html)
    assert "What happened: 1 loss incident" in text
    # The incident headline comes right after the summary, before the configuration.
    head = re.search(r"(\d+) records \((.*?)\) acknowledged at acks=1 by broker 1 in epoch 1 "
                     r"\(ISR \{1,2,3\} at ack\) between [\d.]+ s and [\d.]+ s, lost when broker "
                     rf"1 truncated offsets {first}-{last} \(leader-epoch\) at 5.20 s after "
                     r"broker 2 was elected in epoch 2 during the kill at 3.00-5.00 s; "
                     r"not on any disk", text)
    assert head, text[:2000]
    assert int(head[1]) == len(lost)
    assert text.index("What happened") < text.index("Configuration")
    # A numbered story from the events and the faults, then the records, collapsed.
    story = re.search(r'<ol class="story">(.*?)</ol>', html, re.S)[1]
    steps = re.findall(r"<li>(.*?)</li>", story)
    assert any("kill starts" in s for s in steps) and any("broker 1 fenced" in s for s in steps)
    assert any("leader 2 epoch 2" in s for s in steps)
    assert "the records are gone" in _text(steps[-1]).replace(f"{len(lost)} ", "")
    assert re.search(r'<div class="incident" id="incident-1">.*?<details>', html, re.S)
    assert 'class="records"' in html  # the full per-record table is collapsed too
    # The incident links to the timeline, focused on it.
    link = re.search(r'href="(timeline.html#t0=([\d.]+)&amp;t1=([\d.]+)&amp;p=0&amp;i=1)"', html)
    assert link and float(link[2]) < 2.5 and 5.2 < float(link[3]) < 6.5


def test_timeline_page_is_self_contained(acks1: Path) -> None:
    page = (acks1 / "timeline.html").read_text()
    assert "<script src" not in page and "http" not in page.replace("http-equiv", "")
    blob = re.search(r'<script type="application/json" id="tl-data">(.*?)</script>', page,
                     re.S)[1]
    data = json.loads(blob)
    lane = data["lanes"]["0"]
    assert sum(lane["ack_n"]) > 0 and sum(lane["poll_n"]) >= 0
    assert lane["acks"], "full detail around the incident"
    assert data["incidents"][0]["p"] == 0
    assert [e for e in data["events"]["parts"]["0"] if e[0] == "tr"]
    assert len(data["lost"]["0"]) == pq.read_metadata(acks1 / "loss.parquet").num_rows
    assert [f[0] for f in data["faults"]] == ["kill", "partition"]
    # the lag/unseen views: the unseen count never drops below the records never read
    assert lane["unseen"][-1] >= len(data["lost"]["0"])
    assert len(lane["lag_s"]) == len(lane["lag"]) and max(lane["lag_s"]) > 0
    for name in ("lag.png", "unseen.png"):
        assert (acks1 / name).stat().st_size > 1000
        assert f'src="{name}"' in (acks1 / "report.html").read_text()


def test_records_no_event_explains_form_their_own_incident(tmp_path: Path) -> None:
    run = write_run_folder(tmp_path / "t" / "20260101T000000-s0", lose=True)  # no truncations
    text = _text(report_path(run).read_text())
    assert re.search(r"lost, and no truncation, log recovery, unclean election or disk fault in "
                     r"events.jsonl explains it", text)


def test_a_run_without_loss_has_no_incidents(tmp_path: Path) -> None:
    run = write_run_folder(tmp_path / "t" / "20260101T000000-s0", lose=False)
    html = report_path(run).read_text()
    assert "What happened" not in html and (run / "timeline.html").is_file()


# -- nights ---------------------------------------------------------------------------------

NIGHTS = {  # stamp -> config -> (anomalies, commit)
    "20260101T020000": {"acks1": ({"lost-write": 5, "unseen": 2}, "a"), "safe": ({}, "a"),
                        "elr": ({"inconsistent-offsets": 1}, "a")},
    "20260102T020000": {"acks1": ({"lost-write": 7}, "b"), "safe": ({}, "b"),
                        "elr": ({}, "b")},
    "20260103T020000": {"acks1": ({"lost-write": 4}, "c"), "safe": ({"lost-write": 3}, "b"),
                        "elr": ({"inconsistent-offsets": 2}, "c")},
}
EXPECT = {"acks1": "loss-allowed", "safe": "no-loss", "elr": "no-loss"}


def _write_nights(root: Path, nights: dict[str, dict[str, Any]]) -> list[Path]:
    folders = []
    for stamp, configs in nights.items():
        folder = root / "campaigns" / "night" / stamp
        cells = []
        for config, (anomalies, commit) in configs.items():
            run = folder / "runs" / config
            run.mkdir(parents=True)
            (run / "test.json").write_text(json.dumps(
                {"versions": {"git": {"commit": commit, "dirty": False}}}))
            cells.append({"id": f"{config}/kill/s1", "config": config, "expect": EXPECT[config],
                          "nemesis": "kill", "time_limit": 10, "seed": 1, "status": "done",
                          "run_dir": f"runs/{config}", "anomalies": anomalies,
                          "lost": anomalies.get("lost-write", 0),
                          "outcome": "ok", "verdict": "invalid" if anomalies else "valid",
                          "duration_s": 1.0, "error": None})
        (folder / "campaign.json").write_text(json.dumps(
            {"format": 1, "name": "night", "status": "finished", "verdict": "pass",
             "sessions": [], "cells": cells}))
        folders.append(folder)
    return folders


def test_wilson_interval() -> None:
    assert wilson(0, 0) == (0.0, 1.0)
    low, high = wilson(3, 3)
    assert round(low, 3) == 0.439 and high == 1.0
    low, high = wilson(5, 10)
    assert round(low, 3) == 0.237 and round(high, 3) == 0.763


def test_second_night_differences(tmp_path: Path) -> None:
    first, second, third = _write_nights(tmp_path, NIGHTS)
    diff = compare_nights(first)
    assert {(f.config, f.anomaly, f.status) for f in diff.findings} == {
        ("acks1", "lost-write", "New"), ("acks1", "unseen", "New"),
        ("elr", "inconsistent-offsets", "New")}
    diff = compare_nights(second)  # the second night differs from the first
    assert {(f.config, f.anomaly, f.status) for f in diff.findings} == {
        ("acks1", "lost-write", "Ongoing"), ("acks1", "unseen", "Resolved"),
        ("elr", "inconsistent-offsets", "Resolved")}
    assert not diff.new_in_no_loss
    diff = compare_nights(third)
    assert {(f.config, f.anomaly, f.status) for f in diff.findings} == {
        ("acks1", "lost-write", "Ongoing"), ("safe", "lost-write", "New"),
        ("elr", "inconsistent-offsets", "Rare")}
    assert [(f.config, f.anomaly) for f in diff.new_in_no_loss] == [("safe", "lost-write")]
    cells = {c.config: c for c in diff.cells}
    assert (cells["acks1"].detected, cells["acks1"].runs) == (3, 3)
    assert cells["acks1"].marks == ["D", "D", "D"] and cells["elr"].marks == ["D", ".", "D"]
    assert round(cells["acks1"].low, 3) == 0.439
    # safe ran commit b on nights 2 and 3 with different verdicts; elr never repeated a commit
    assert cells["safe"].flaky and not cells["elr"].flaky and not cells["acks1"].flaky
    summary = format_summary(diff)
    assert "New: safe lost-write (expects no-loss)" in summary and "flaky" in summary
    # The index shows the same.
    text = _text(render_campaign(third).read_text())
    assert "What is new" in text
    assert re.search(r"New safe no-loss lost-write 1 / 3", text)
    assert re.search(r"Rare elr no-loss inconsistent-offsets 2 / 3", text)
    assert re.search(r"safe kill 10 s 1 / 3 33% \(6-79%\) \.\.D flaky", text)


def test_campaign_command_fails_on_a_new_finding_in_a_no_loss_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folders = _write_nights(tmp_path, NIGHTS)
    args = type("Args", (), {"file": Path("x.toml"), "resume": False, "time_budget": None,
                             "seeds": None, "only": None, "systems": None})()
    for folder, code in zip(folders, (1, 0, 1), strict=True):  # night 1: elr (no-loss) is New
        monkeypatch.setattr("harness.campaign.run_campaign", lambda *a, f=folder, **kw: f)
        # after harness.campaign is imported (above), which binds the real one for itself
        monkeypatch.setattr("harness.campaign_spec.load_spec", lambda *a: ("x", []))
        assert campaign_command.main(args) == code, folder.name


@pytest.mark.slow
def test_simulated_acks1_run_reads_as_a_few_incidents(tmp_path: Path) -> None:
    """The real thing: `harness simulate` of validation.toml's acks1 cell, checked by Spark."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-m", "harness.cli", "simulate", "--campaign",
                    str(root / "campaigns/validation.toml"), "--cell", "acks1", "--seed", "1",
                    "--keep-going"],
                   cwd=root, env={**os.environ, "HARNESS_RESULTS": str(tmp_path)},
                   check=False, capture_output=True, timeout=600)
    run = next(tmp_path.glob("validation-acks1*/*/test.json")).parent
    lost = (pq.read_metadata(run / "loss.parquet").num_rows
            if (run / "loss.parquet").is_file() else 0)
    html = (run / "report.html").read_text()
    lines = [_text(x) for x in re.findall(r'<li class="incident-line[^"]*">(.*?)</li>', html,
                                           re.S)]
    assert 1 <= len(lines) <= 3 and lost > 100
    assert sum(int(re.match(r"\s*([\d,]+) record", x)[1].replace(",", "")) for x in lines) == lost
    for line in lines:
        assert "acknowledged at acks=1 by broker" in line and "truncated offsets" in line
        assert "was elected in epoch" in line and "during the partition" in line


def test_real_acks1_run_reads_as_two_incidents(tmp_path: Path) -> None:
    """tests/data/acks1-sim: a real simulated acks=1 run (README.md there), without history."""
    import shutil

    run = tmp_path / "validation-acks1-leader-faults" / "20261123T144836-s1"
    shutil.copytree(Path(__file__).resolve().parents[1] / "data" / "acks1-sim", run)
    html = report_path(run).read_text()
    lines = [_text(x).strip() for x in
             re.findall(r'<li class="incident-line[^"]*">(.*?)</li>', html, re.S)]
    assert len(lines) == 2
    assert re.match(r"1,893 records \(1,893 lost-write\) acknowledged at acks=1 by broker 2 in "
                    r"epoch 1 .* lost when broker 2 truncated offsets 890-2782 \(leader-epoch\) "
                    r"at 12.95 s after broker 1 was elected in epoch 2", lines[0])
    assert re.match(r"918 records \(918 lost-write\) acknowledged at acks=1 by broker 1 in "
                    r"epoch 0 .* lost when broker 1 truncated offsets 598-1515 \(leader-epoch\) "
                    r"at 5.67 s after broker 2 was elected in epoch 1", lines[1])
    assert "What happened: 2 loss incidents" in _text(html)


def test_two_simulated_nights_where_the_second_differs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two nights of a small campaign through run_campaign (test_campaign's simulated runs):
    on the second, the no-loss config "safe" runs with acks=1 (a simulated regression)."""
    from test_campaign import simulated_run_test

    from harness.campaign import run_campaign

    night = ('name = "tiny"\nseeds = [1]\ntime_limit = 10\n[set]\nnodes = 4\n'
             '[[config]]\nname = "safe"\nexpect = "no-loss"\n{safe}'
             '[[config]]\nname = "acks1"\nexpect = "loss-allowed"\n'
             'set = {{ "workload.acks" = "1" }}\n'
             '[[nemesis]]\nname = "kill"\nfaults = ["kill"]\n')
    spec = tmp_path / "tiny.toml"
    spec.write_text(night.format(safe=""))
    first = run_campaign(spec, False, None, simulated_run_test, tmp_path / "results")
    spec.write_text(night.format(safe='set = { "workload.acks" = "1" }\n'))
    second = run_campaign(spec, False, None, simulated_run_test, tmp_path / "results")
    assert first.parent == second.parent and first.name < second.name
    out = capsys.readouterr().out
    assert "compared with 1 earlier night(s) of campaign tiny:" in out
    assert "New: safe lost-write (expects no-loss)" in out
    assert "Ongoing: acks1 lost-write" in out
    diff = compare_nights(second)
    assert [(f.config, f.anomaly) for f in diff.new_in_no_loss] == [("safe", "lost-write")]
    text = _text((second / "index.html").read_text())
    assert re.search(r"New safe no-loss lost-write 1 / 2", text)
    assert re.search(r"Ongoing acks1 loss-allowed lost-write 2 / 2", text)
    assert re.search(r"safe kill 10 s 1 / 2 50% \(9-91%\) \.D", text)
