"""runformat: the one reader of history.jsonl and events.jsonl, and its malformed-line policy."""

from __future__ import annotations

from pathlib import Path

from support.history import read_history

from replication.outputs import Event
from replication.runtime import EventLog
from runformat import Tally, events, history, last_time, node_events, read_events
from runformat.jsonl import event_line, history_line


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_malformed_lines_are_skipped_counted_and_named_and_a_torn_tail_is_apart(tmp_path):
    path = _write(tmp_path / "history.jsonl", "\n".join([
        '{"index": 0, "time": 1, "process": 0, "type": "invoke", "f": "send"}',
        "",  # blank: nothing
        '{"index": 1, "time": ',  # invalid JSON
        "[1, 2]",  # not an object
        '{"index": 2, "time": true}',  # a boolean is not a time
        '{"index": 3, "time": 7, "process": 0, "type": "ok", "f": "send"}',
        '{"index": 4, "ti']))  # the last line, cut short by a crash
    tally = Tally("history.jsonl")
    ops = list(history(path, tally))
    assert [op["index"] for op in ops] == [0, 3]
    assert (tally.malformed, tally.torn, tally.end_ns, tally.lines) == (3, 1, 7, 7)
    assert tally.named[0].startswith("history.jsonl line 3: invalid JSON")
    assert tally.named[1:] == ["history.jsonl line 4: not a JSON object with an integer `time`",
                               "history.jsonl line 5: not a JSON object with an integer `time`",
                               "history.jsonl line 7: torn last line (no newline)"]
    notes = tally.notes()
    assert notes[0].startswith("3 malformed history.jsonl line(s) skipped: history.jsonl line 3")
    assert notes[1] == "history.jsonl: the last line is cut short (a crash mid-write); skipped"


def test_events_times_are_integers_and_read_events_sorts_them(tmp_path):
    path = _write(tmp_path / "events.jsonl",
                  '{"time": 5.0, "kind": "b"}\n{"time": 2, "kind": "a"}\n{"kind": "no time"}\n')
    assert [(e["time"], type(e["time"])) for e in events(path)] == [(5, int), (2, int)]
    assert [e["kind"] for e in read_events(path)] == ["a", "b"]
    assert read_events(tmp_path / "missing.jsonl") == []


def test_a_nodes_own_event_log_is_read_by_its_ts_and_a_killed_writers_tail_is_said(tmp_path):
    log = EventLog(tmp_path / "data", 2)  # the node's writer: events.jsonl beside data/
    log.write(Event("broker-start", {"broker_epoch": 1}))
    log.write(Event("isr-change", {"topic": "t", "partition": 0, "isr": [1, 2]}))
    log.close()
    path = tmp_path / "events.jsonl"
    with path.open("a") as f:
        f.write('{"ts": "noon", "node": 2, "kind": "x"}\n{"ts": 12, "node": 2, "ki')
    tally = Tally("nodes/n3/events.jsonl")
    read = list(node_events(path, tally))
    assert [(e["kind"], e["node"], type(e["ts"])) for e in read] == [
        ("broker-start", 2, float), ("isr-change", 2, float)]
    assert "time" not in read[0]  # the merge gives it its time on the run clock
    assert (tally.malformed, tally.torn) == (1, 1)
    assert tally.named[0] == "nodes/n3/events.jsonl line 3: not a JSON object with a number `ts`"


def test_one_line_is_judged_as_the_file_readers_judge_it(tmp_path):
    lines = ['{"index": 0, "time": 1, "f": "send"}', "", "[1]", '{"time": true}', '{"index": 1',
             '{"time": 2.5, "kind": "e"}', '{"index": 2, "time": 3, "f": "poll"}']
    path = _write(tmp_path / "h.jsonl", "\n".join(lines) + "\n")
    assert [history_line(line) for line in lines if history_line(line)] == list(history(path))
    assert [event_line(line) for line in lines if event_line(line)] == list(events(path))
    assert event_line('{"time": 2.5}') == {"time": 2}
    assert history_line(b'{"time": 4}\n') == {"time": 4}  # bytes, as a rewriter holds them
    assert history_line(b'{"time": 4, "v": "\xff"}\n') is None  # not UTF-8


def test_last_time_reads_the_end_of_the_file_only(tmp_path):
    huge = '{"index": 1, "time": 9, "records": [' + ", ".join(["[1, 2]"] * 50_000) + "]}"
    path = _write(tmp_path / "h.jsonl", '{"index": 0, "time": 5}\n' + huge + "\n")
    assert last_time(path) == 9
    assert last_time(_write(tmp_path / "t.jsonl", '{"index": 0, "time": 5}\n{"index": 1, "ti')) == 5
    assert last_time(_write(tmp_path / "e.jsonl", "")) == 0


def test_read_history_refuses_a_malformed_line_and_drops_a_torn_tail(tmp_path):
    good = '{"index": 0, "time": 1, "process": 0, "type": "invoke", "f": "send"}\n'
    assert len(read_history(_write(tmp_path / "a.jsonl", good + '{"index": 1'))) == 1
    try:
        read_history(_write(tmp_path / "b.jsonl", good + "null\n" + good))
    except ValueError as e:
        assert "b.jsonl line 2: not a JSON object" in str(e)
    else:
        raise AssertionError("a malformed line was read")
