"""corrupt-segment: a stopped broker's segment file is damaged; on restart it must detect the
damage by CRC, cut its log to the last good record and re-fetch the rest from the leader,
never serving the damaged record.

- pure: the kind is registered, planned and accepted by the config; its program
  (nemesis/segment_damage.py) damages a real segment directory as it reports;
- simulated: the World's verb damages the simulated disk exactly as the program damages real
  files, and a simulated run with the fault cuts, re-fetches and loses nothing;
- storage: replication.segment_log recovery on real files with a bit flipped mid-log;
- real hosts (netns): a run where partition 0's followers are damaged while stopped, then its
  leader is killed so a repaired follower leads: nothing acknowledged is lost, no damaged
  value is served, and the brokers' events show the recovery cut."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest
from support.segments import encode_record

from harness.config import load_config
from nemesis import segment_damage
from nemesis.hosts_world import corrupt_argv
from nemesis.kinds import KNOWN_FAULTS, TARGET_MODES, Topology, lookup
from nemesis.schedule import ScheduleParams, plan
from replication.log import OffsetOutOfRange, Record
from replication.segment_format import HEADER_SIZE, scan_segment, segment_name
from replication.segment_log import CorruptLogError, SegmentLog
from simulation.simfs import SimFs

KIND = "corrupt-segment"

# -- pure ---------------------------------------------------------------------------------


def test_registered_as_a_disk_fault_of_both_worlds():
    kind = lookup(KIND)
    assert KIND in KNOWN_FAULTS
    assert (kind.family, kind.simulated, kind.needs_lazyfs) == ("disk", True, False)


# (aimed at a coordinator it is refused: tests/nemesis/test_txn_targets.py, test_group_targets.py)
@pytest.mark.parametrize("targets", [m for m in TARGET_MODES if not m.endswith("-coordinator")])
def test_planned_when_listed_and_never_at_the_controller(targets):
    params = ScheduleParams(seed=11, faults=(KIND,), time_limit=600, interval=5, duration=3,
                            partitions=3, brokers=3, targets=targets)  # fmt: skip
    entries = plan(params)
    assert entries and {e["kind"] for e in entries} == {KIND}
    selects = {e["target"]["select"] for e in entries}
    assert selects <= {"leader", "random-broker", "followers"}, selects
    assert all("pick" in e["target"] for e in entries)
    assert all("partition" in e["target"] for e in entries
               if e["target"]["select"] in ("leader", "followers"))


def test_config_accepts_the_kind_and_suggests_it_for_a_typo():
    config = load_config("fast", [f"nemesis.faults=['{KIND}', 'kill']",
                                  f"nemesis.weights.{KIND}=2"])
    assert config["nemesis"]["faults"] == [KIND, "kill"]
    with pytest.raises(ValueError, match=KIND):
        load_config("fast", ["nemesis.faults=['corrupt-segmnt']"])


def _topology() -> Topology:
    async def state(partition: int) -> dict:
        return {"leader": 1, "isr": [1, 2, 3], "elr": [], "replicas": [1, 2, 3]}
    return Topology(("n1", "n2", "n3", "n4"), "n1", {1: "n2", 2: "n3", 3: "n4"}, state)


def test_targets_resolve_to_brokers_only():
    kind = lookup(KIND)
    resolve = lambda target: asyncio.run(kind.resolve(_topology(), target))  # noqa: E731
    assert resolve({"select": "followers", "partition": 0, "pick": 1}) == ["n3", "n4"]
    assert resolve({"select": "leader", "partition": 0, "pick": 1}) == ["n2"]
    assert resolve({"fixed": {"nodes": ["n1", "n3"]}}) == ["n3"]  # a replay never hits n1
    assert resolve({"select": "controller", "pick": 1}) == []


def _records(n: int) -> list[Record]:
    return [Record(i, i // 10, 1000 + i, str(1_000_000 + i).encode()) for i in range(n)]


def _write_log(folder: Path, records: list[Record], segment_bytes: int) -> None:
    log = SegmentLog(folder, segment_bytes=segment_bytes)
    for r in records:
        log.append_records([r])
    log.close(clean=False)


def _corrupt(data_dir: Path, seed: str) -> dict:
    out = subprocess.run(corrupt_argv(sys.executable, str(data_dir), seed), capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)


def test_the_snippet_damages_what_it_reports_and_recovery_cuts_exactly_there(tmp_path):
    original = _records(60)
    seen_modes, seen_reasons = set(), set()
    for seed in range(16):
        data = tmp_path / f"d{seed}"
        _write_log(data / "chaos-0", original, segment_bytes=400)
        _write_log(data / "chaos-1", original[:5], segment_bytes=400)
        done = _corrupt(data, f"{seed}:n2")
        segment = data / done["file"]
        assert done["mode"] in ("bit-flip", "truncate") and segment.exists()
        start, end = done["record_span"]
        if done["mode"] == "bit-flip":
            assert start + HEADER_SIZE <= done["offset"] < end and 1 <= done["bytes"] <= 3
            assert segment.stat().st_size == done["file_size"]
        else:
            assert start < done["offset"] < end
            assert segment.stat().st_size == done["offset"] == done["file_size"] - done["bytes"]
        recovered = SegmentLog(segment.parent, segment_bytes=400)
        info = recovered.recovery_info
        assert recovered.end_offset == done["record_offset"], done
        assert info.truncated_bytes > 0
        if done["mode"] == "bit-flip":
            assert info.reason == "corrupt", done
        assert recovered.read(0, 1000) == original[: done["record_offset"]]
        seen_modes.add(done["mode"])
        seen_reasons.add(info.reason)
    assert seen_modes == {"bit-flip", "truncate"}
    assert seen_reasons == {"corrupt", "torn-tail"}  # a cut in the last segment looks torn


def test_the_snippet_reports_an_empty_data_directory(tmp_path):
    (tmp_path / "chaos-0").mkdir()
    assert "no segment data" in _corrupt(tmp_path, "1:n2")["note"]


# -- simulated ------------------------------------------------------------------------------


def _sim_copy(data: Path) -> SimFs:
    """A SimFs holding the files under `data` at /data, durably."""
    fs = SimFs()
    for path in sorted(data.rglob("*")):
        if path.is_file():
            target = PurePosixPath("/data") / path.relative_to(data).as_posix()
            fs.makedirs(target.parent)
            fd = fs.open(target, os.O_WRONLY | os.O_CREAT)
            fs.pwrite(fd, path.read_bytes(), 0)
            fs.fsync(fd)
            fs.close(fd)
    return fs


def test_the_simulated_disk_is_damaged_exactly_as_the_program_damages_real_files(tmp_path):
    original = tmp_path / "original"
    _write_log(original / "chaos-0", _records(60), segment_bytes=400)
    _write_log(original / "chaos-1", _records(5), segment_bytes=400)
    for seed in range(12):
        real = tmp_path / f"d{seed}"
        shutil.copytree(original, real)
        fs = _sim_copy(original)
        done = _corrupt(real, f"{seed}:n3")
        assert segment_damage.damage(fs, "/data", f"{seed}:n3") == done
        for path in sorted(p for p in real.rglob("*") if p.is_file()):
            sim = PurePosixPath("/data") / path.relative_to(real).as_posix()
            assert fs.read_bytes(sim) == path.read_bytes(), (seed, sim)


def test_a_simulated_run_repairs_damaged_followers_from_the_leader(tmp_path):
    """The real-host run below, in the simulator through the same nemesis and kind: partition
    0's followers are killed and damaged (bit flips), started again, then its leader is
    killed. The damaged brokers cut their logs where the damage is and re-fetch; no invariant
    is violated (the damage cuts records whose fsync completed, and is not counted against
    SyncedRecordsSurvive), nothing acknowledged is lost."""
    from support.history import read_history

    from checkers.check import check_path
    from harness.sim_run import as_simulated, simulate_into
    from harness.test import Plan, Test

    pick = _bit_flip_pick(tmp_path, ["n2", "n3", "n4"])
    config = as_simulated(load_config("fast", [
        "nodes=4", "topic.partitions=1", "time_limit=17", "seed=5", "workload.rate=300",
        "workload.final_read_timeout=30", f"nemesis.faults=['{KIND}', 'kill']",
        "system.flush.messages=1",  # every record synced: the damage cuts synced records
    ]))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    r = simulate_into(Test.of(config, tmp_path, plan=Plan.scripted(_scripted(pick)),
                              check=False), run_dir, keep_going=True)
    assert r.invariants == [], r.invariants
    ops = read_history(run_dir / "history.jsonl")
    (started,) = [op for op in ops if op["f"] == f"start-{KIND}"]
    damage = started["value"]["lost"]
    assert len(damage) == 2 and all(d["mode"] == "bit-flip" for d in damage.values()), damage
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    for node, d in damage.items():
        (recovery, *_) = [e for e in events if e["kind"] == "log-recovery" and e["host"] == node]
        assert (recovery["reason"], recovery["log_end_offset"]) == ("corrupt", d["record_offset"])
        assert d["lost_records"] > 0
    results = check_path(run_dir, backend="reference")
    assert results["valid"] is True, results["anomalies"]


# -- storage --------------------------------------------------------------------------------


def _flip(path: Path, position: int, mask: int = 0x10) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= mask
    path.write_bytes(bytes(data))


def test_a_bit_flipped_mid_log_is_cut_with_everything_after_it_and_never_read(tmp_path):
    original = _records(40)
    _write_log(tmp_path, original, segment_bytes=300)
    names = sorted(p.name for p in tmp_path.glob("*.log"))
    assert len(names) >= 4
    victim = tmp_path / names[1]  # an earlier segment: later ones exist after it
    records, valid, size = scan_segment(victim)
    assert valid == size and len(records) >= 3
    hit = records[1]  # a record in the middle of the segment
    position = len(encode_record(records[0])) + HEADER_SIZE + 20  # in its value
    _flip(victim, position)

    recovered = SegmentLog(tmp_path, segment_bytes=300)
    info = recovered.recovery_info
    assert recovered.end_offset == hit.offset
    assert info.reason == "corrupt" and info.deleted_segments == len(names) - 2
    assert info.truncated_bytes == sum(len(encode_record(r)) for r in original[hit.offset:])
    assert recovered.read(0, 1000) == original[: hit.offset]
    assert recovered.read(hit.offset, 1) == []  # the damaged record is gone, not served
    with pytest.raises(OffsetOutOfRange):
        recovered.read(hit.offset + 1, 1)

    # A follower re-fetches the rest from its leader: the log is whole again, and clean.
    recovered.append_records(original[hit.offset:])
    recovered.close(clean=True)
    again = SegmentLog(tmp_path, segment_bytes=300)
    assert again.read(0, 1000) == original
    assert (again.recovery_info.truncated_bytes, again.recovery_info.reason) == (0, None)


def test_damage_under_a_running_log_is_an_error_not_a_wrong_record(tmp_path):
    log = SegmentLog(tmp_path)
    log.append_records(_records(5))
    _flip(tmp_path / segment_name(0), len(encode_record(_records(1)[0])) + HEADER_SIZE + 21)
    assert log.read(0, 1) == _records(1)
    with pytest.raises(CorruptLogError):
        log.read(0, 5)


def test_recovery_reasons_tell_a_torn_tail_from_corruption_and_stale_records(tmp_path):
    good = b"".join(encode_record(r) for r in _records(3))
    last = encode_record(Record(3, 0, 0, b"last"))
    cases = {
        "torn": (good + last[:-2], "torn-tail"),
        "zeroes": (good + bytes(64), "torn-tail"),
        "bad-crc": (good + last[:-1] + bytes([last[-1] ^ 1]), "corrupt"),
        "bad-length": (good + b"\xff" * 12, "corrupt"),
        "stale": (good + encode_record(Record(7, 0, 0, b"gap")), "discontinuous"),
    }
    for name, (content, reason) in cases.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / segment_name(0)).write_bytes(content)
        log = SegmentLog(folder)
        assert (log.end_offset, log.recovery_info.reason) == (3, reason), name
    # A torn record is corruption when more of the log follows it.
    folder = tmp_path / "torn-earlier"
    folder.mkdir()
    (folder / segment_name(0)).write_bytes(good + last[:-2])
    (folder / segment_name(4)).write_bytes(encode_record(Record(4, 0, 0, b"next")))
    log = SegmentLog(folder)
    assert (log.end_offset, log.recovery_info.reason) == (3, "corrupt")


# -- real hosts ----------------------------------------------------------------------------

needs_hosts = pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/usr/sbin/sshd").exists(),
    reason="network namespaces and sshd need root and openssh-server",
)


def _bit_flip_pick(tmp_path: Path, nodes: list[str]) -> int:
    """A pick for which every node's damage is a bit flip (the seed alone decides the mode):
    the run then checks CRC detection, not a cut that looks like a torn tail."""
    probe = tmp_path / "probe"
    _write_log(probe / "chaos-0", _records(3), segment_bytes=1 << 20)
    original = (probe / "chaos-0" / segment_name(0)).read_bytes()
    for pick in range(1000):
        modes = set()
        for node in nodes:
            modes.add(_corrupt(probe, f"{pick}:{node}")["mode"])
            (probe / "chaos-0" / segment_name(0)).write_bytes(original)
        if modes == {"bit-flip"}:
            return pick
    raise AssertionError("no pick found")


def _scripted(pick: int) -> list[dict]:
    """Partition 0's followers are killed, damaged and started again; once they are back in
    the ISR its leader is killed, so a repaired follower leads and the final read reads it."""
    return [
        {"id": 0, "kind": KIND, "start_s": 3.0, "duration_s": 3.0,
         "target": {"select": "followers", "partition": 0, "pick": pick}},
        {"id": 1, "kind": "kill", "start_s": 11.0, "duration_s": 3.0,
         "target": {"select": "leader", "partition": 0, "pick": 1}},
    ]


@pytest.mark.netns
@needs_hosts
def test_followers_damaged_while_stopped_repair_from_the_leader(tmp_path):
    from support.history import read_history

    from checkers.check import check_path
    from harness.runner import run_test
    from harness.test import Plan, Test

    pick = _bit_flip_pick(tmp_path, ["n2", "n3", "n4"])
    scripted = _scripted(pick)
    config = load_config("fast", [
        "nodes=4", "topic.partitions=1", "time_limit=17", "seed=5", "workload.rate=300",
        "workload.final_read_timeout=30", f"nemesis.faults=['{KIND}', 'kill']",
    ])
    run_dir = run_test(Test.of(config, tmp_path / "results", plan=Plan.scripted(scripted),
                               check=False))

    ops = read_history(run_dir / "history.jsonl")
    started = [op for op in ops if op["f"] == f"start-{KIND}"]
    assert len(started) == 1 and "error" not in started[0]["value"], started
    damage = started[0]["value"]["lost"]
    assert len(damage) == 2 and all(d["mode"] == "bit-flip" for d in damage.values()), damage
    assert all(d["file"] == f"chaos-0/{segment_name(0)}" for d in damage.values()), damage
    assert any(op["f"] == "start-kill" for op in ops)

    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    for node, d in damage.items():
        recoveries = [e for e in events if e["kind"] == "log-recovery" and e["host"] == node]
        assert recoveries, f"{node} did not report its recovery cut"
        assert recoveries[0]["reason"] == "corrupt" and recoveries[0]["truncated_bytes"] > 0
        assert recoveries[0]["log_end_offset"] == d["record_offset"], (recoveries[0], d)

    after = min(e["ts"] for e in events if e["kind"] == "log-recovery")
    assert any(e["kind"] == "become-leader" and e["host"] in damage and e["ts"] > after
               for e in events), "a repaired follower must have led partition 0"

    # Repaired: every replica ends with the same records (the collected data directories).
    logs = {}
    for host in ("n2", "n3", "n4"):
        folder = run_dir / "nodes" / host / "data" / "chaos-0"
        logs[host] = [r for seg in sorted(folder.glob("*.log")) for r in scan_segment(seg)[0]]
    lengths = {h: len(rs) for h, rs in logs.items()}
    assert min(lengths.values()) > max(d["record_offset"] for d in damage.values()), lengths
    assert logs["n2"] == logs["n3"] == logs["n4"], lengths

    results = check_path(run_dir, backend="reference")
    assert results["valid"] is True, results["anomalies"]
    for anomaly in ("lost-write", "unseen", "inconsistent-offsets", "duplicate"):
        assert results["anomalies"].get(anomaly, {}).get("count", 0) == 0, anomaly
