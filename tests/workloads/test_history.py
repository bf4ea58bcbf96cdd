"""workloads.history: the history.jsonl contract, pairing, threads, asyncio, SIGKILL."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.history import read_history

from workloads import history
from workloads.history import (
    RUN_ENDED,
    HistoryError,
    HistoryWriter,
    ProcessPool,
)


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_contract(ops: list[dict]) -> None:
    """Index contiguous from 0, time non-decreasing int ns, and per process: invoke, then
    exactly one completion, and nothing after an info."""
    assert [op["index"] for op in ops] == list(range(len(ops)))
    times = [op["time"] for op in ops]
    assert all(isinstance(t, int) and t >= 0 for t in times) and times == sorted(times)
    open_ops: dict = {}
    retired: set = set()
    for op in ops:
        p = op["process"]
        if p == "nemesis":
            assert op["type"] == "info"
            continue
        assert p not in retired, f"process {p} reused after info: {op}"
        if op["type"] == "invoke":
            assert p not in open_ops, f"process {p} invoked twice: {op}"
            open_ops[p] = op
        else:
            assert op["type"] in ("ok", "fail", "info")
            assert open_ops.pop(p)["f"] == op["f"]
            if op["type"] == "info":
                retired.add(p)


def test_ops_follow_the_design_format(tmp_path):
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as h:
        send = h.invoke(3, "send", partition=1, value=4711)
        send.ok(offset=88, node=2, epoch=5)
        poll = h.invoke(7, "poll", partition=1, offset=80)
        poll.ok(records=[[80, 4690], [81, 4702]], hwm=82)
        h.nemesis("start-power-loss", {"nodes": ["n1"]})
        h.invoke(4, "send", partition=0, value=1).fail("NOT_ENOUGH_REPLICAS")
    ops = lines(path)
    assert_contract(ops)
    assert list(ops[0]) == ["index", "time", "process", "type", "f", "partition", "value"]
    assert ops[1] == {**ops[1], "process": 3, "type": "ok", "f": "send", "partition": 1,
                      "value": 4711, "offset": 88, "node": 2, "epoch": 5}
    assert ops[3]["records"] == [[80, 4690], [81, 4702]] and ops[3]["offset"] == 80
    assert ops[4] == {"index": 4, "time": ops[4]["time"], "process": "nemesis", "type": "info",
                      "f": "start-power-loss", "value": {"nodes": ["n1"]}}
    assert ops[6]["type"] == "fail" and ops[6]["error"] == "NOT_ENOUGH_REPLICAS"
    assert read_history(path) == ops


def test_a_buffered_writer_writes_whole_lines_late_and_the_same_bytes(tmp_path):
    """buffer_bytes (the simulator's mode): nothing reaches the file until the buffer fills,
    then whole lines; close() writes the rest; the file is the unbuffered writer's."""
    def write(path, **kw):
        clock = iter(range(0, 10**9, 1000))
        h = HistoryWriter(path, clock=lambda: next(clock), background_fsync=False, **kw)
        sizes = []
        for i in range(40):
            h.invoke(i, "send", value=f"v{i}").ok(offset=i)
            sizes.append(path.stat().st_size)
        h.close()
        return sizes

    plain, buffered = tmp_path / "plain.jsonl", tmp_path / "buffered.jsonl"
    write(plain)
    sizes = write(buffered, buffer_bytes=2000)
    assert buffered.read_bytes() == plain.read_bytes()
    assert sizes[0] == 0 and 0 < max(sizes) < plain.stat().st_size
    for size in set(sizes) - {0}:  # each write() ended on a line
        assert plain.read_bytes()[size - 1:size] == b"\n"


def test_a_real_runs_buffered_writer_writes_its_lines_within_the_flush_interval(tmp_path):
    """buffer_bytes with flush_interval (a real run's mode): lines far below the buffer's size
    still reach the file, whole, within about the interval, without close()."""
    path = tmp_path / "history.jsonl"
    h = HistoryWriter(path, buffer_bytes=1 << 20, flush_interval=0.05, fsync_interval=0.2)
    try:
        h.invoke(0, "send", value=1).ok(offset=0)
        h.nemesis("start-kill", {"nodes": ["n2"]})
        deadline = time.monotonic() + 10
        while path.read_bytes().count(b"\n") < 3:
            assert time.monotonic() < deadline, "the gathered lines were never written"
            time.sleep(0.01)
        assert [op["type"] for op in read_history(path, allow_torn_tail=False)] == \
            ["invoke", "ok", "info"]
        h.invoke(1, "send", value=2)
    finally:
        h.close()
    assert [op["index"] for op in read_history(path, allow_torn_tail=False)] == [0, 1, 2, 3, 4]


def test_time_counts_from_the_given_start(tmp_path):
    start = time.monotonic_ns() - 5_000_000_000
    with HistoryWriter(tmp_path / "h.jsonl", start_ns=start) as h:
        op = h.nemesis("start-kill")
    assert 5_000_000_000 <= op["time"] < 600_000_000_000


def test_exactly_one_completion_and_no_reuse_after_info(tmp_path):
    with HistoryWriter(tmp_path / "h.jsonl") as h:
        op = h.invoke(1, "send", partition=0, value=1)
        with pytest.raises(HistoryError, match="in flight"):
            h.invoke(1, "send", partition=0, value=2)
        op.info("timeout")
        with pytest.raises(HistoryError, match="already completed"):
            op.ok(offset=3)
        with pytest.raises(HistoryError, match="retired"):
            h.invoke(1, "send", partition=0, value=3)
        with pytest.raises(HistoryError, match="assigned by the writer"):
            h.write({"process": 2, "type": "invoke", "f": "send", "index": 9})
        with pytest.raises(HistoryError, match="not an operation's fields"):
            h.invoke(2, "send", type="ok", value=4)  # the invoke's fields are its own
        with pytest.raises(TypeError):
            h.invoke(2, "send", value=object())
        h.invoke(2, "send", value=5).ok()  # the failed write consumed no index
    ops = read_history(tmp_path / "h.jsonl")
    assert_contract(ops)
    assert [op["index"] for op in ops] == [0, 1, 2, 3]


def test_invokes_and_completions_write_what_raw_writes_of_their_ops_write(tmp_path):
    # invoke() and the completions build each line's dict once (_emit_locked), past the
    # checks of write(): the same bytes as write() of the ops they stand for, a completion's
    # fields overriding the invoke's in place; a completion naming index or time still refused.
    clock = iter(range(0, 10**9, 1000))
    fast = HistoryWriter(tmp_path / "fast.jsonl", clock=lambda: next(clock))
    a = fast.invoke(1, "send", partition=0, value=7)
    b = fast.invoke(2, "poll", partition=1, offset=3)
    a.ok(node=1, epoch=0, offset=6)
    b.fail("NOT_LEADER", partition=2, offset=4)
    c = fast.invoke(3, "send", partition=0, value=8)
    with pytest.raises(HistoryError, match="assigned by the writer"):
        c.ok(time=5)
    c.info()
    fast.close()
    clock = iter(range(0, 10**9, 1000))
    raw = HistoryWriter(tmp_path / "raw.jsonl", clock=lambda: next(clock))
    for op in ({"process": 1, "type": "invoke", "f": "send", "partition": 0, "value": 7},
               {"process": 2, "type": "invoke", "f": "poll", "partition": 1, "offset": 3},
               {"process": 1, "type": "ok", "f": "send", "partition": 0, "value": 7, "node": 1,
                "epoch": 0, "offset": 6},
               {"process": 2, "type": "fail", "f": "poll", "partition": 2, "offset": 4,
                "error": "NOT_LEADER"},
               {"process": 3, "type": "invoke", "f": "send", "partition": 0, "value": 8}):
        raw.write(op)
    raw.write({"process": 3, "type": "info", "f": "send", "partition": 0, "value": 8})
    raw.close()
    assert (tmp_path / "fast.jsonl").read_bytes() == (tmp_path / "raw.jsonl").read_bytes()


def test_close_completes_outstanding_invokes_as_run_ended(tmp_path):
    path = tmp_path / "h.jsonl"
    h = HistoryWriter(path)
    h.invoke(1, "send", partition=0, value=1)
    h.invoke(2, "poll", partition=0)
    h.invoke(3, "send", partition=1, value=2).ok(offset=0)
    h.close()
    h.close()  # idempotent
    ops = read_history(path)
    assert_contract(ops)
    ended = [op for op in ops if op.get("error") == RUN_ENDED]
    assert {op["process"] for op in ended} == {1, 2}
    assert all(op["type"] == "info" for op in ended)
    assert ended[0]["value"] == 1  # the completion repeats the invoke's fields
    with pytest.raises(HistoryError, match="closed"):
        h.nemesis("stop-kill")


def test_refuses_to_append_to_an_existing_history(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text("")
    with pytest.raises(FileExistsError):
        HistoryWriter(path)


def test_process_pool_retire_gives_fresh_numbers():
    pool = ProcessPool()
    a, b = pool.new(), pool.new()
    c = pool.retire(a)
    assert len({a, b, c}) == 3 and pool.active == frozenset({b, c})
    with pytest.raises(HistoryError):
        pool.retire(a)


def test_many_threads_keep_the_contract(tmp_path):
    path = tmp_path / "h.jsonl"
    pool = ProcessPool()
    with HistoryWriter(path, fsync_interval=0.05) as h:
        def client(seed: int) -> None:
            p = pool.new()
            for i in range(300):
                op = h.invoke(p, "send", partition=seed, value=seed * 1000 + i)
                if i % 17 == 0:
                    op.info("timeout")
                    p = pool.retire(p)
                else:
                    op.ok(offset=i)
        threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    ops = read_history(path)
    assert len(ops) == 8 * 300 * 2
    assert_contract(ops)


def test_asyncio_tasks_share_one_writer(tmp_path):
    path = tmp_path / "h.jsonl"

    async def client(h: HistoryWriter, p: int) -> None:
        for i in range(50):
            op = h.invoke(p, "send", partition=0, value=p * 100 + i)
            await asyncio.sleep(0)
            op.ok(offset=i)

    async def main() -> None:
        with HistoryWriter(path) as h:
            await asyncio.gather(*(client(h, p) for p in range(5)))

    asyncio.run(main())
    ops = read_history(path)
    assert len(ops) == 500
    assert_contract(ops)


def test_reader_drops_only_a_torn_last_line(tmp_path):
    path = tmp_path / "h.jsonl"
    good = '{"index": 0, "time": 1, "process": 0, "type": "invoke", "f": "send"}\n'
    path.write_text(good + '{"index": 1, "ti')
    assert read_history(path) == [json.loads(good)]
    with pytest.raises(ValueError, match="line 2"):
        read_history(path, allow_torn_tail=False)
    path.write_text(good + "garbage\n" + good)
    with pytest.raises(ValueError, match="line 2"):
        read_history(path)


WRITER = textwrap.dedent("""
    import sys, threading
    from workloads.history import HistoryWriter, ProcessPool
    h = HistoryWriter(sys.argv[1], fsync_interval=0.2)
    pool = ProcessPool()
    def client(n):
        p = pool.new()
        i = 0
        while True:
            op = h.invoke(p, "send", partition=n, value=n * 10**9 + i)
            if i % 11 == 0:
                op.info("timeout")
                p = pool.retire(p)
            else:
                op.ok(offset=i, padding="x" * (i % 300))
            i += 1
    for n in range(4):
        threading.Thread(target=client, args=(n,), daemon=True).start()
    threading.Event().wait()
""")


def test_sigkilled_writer_leaves_a_parseable_contiguous_prefix(tmp_path):
    path = tmp_path / "history.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)],
                            cwd=Path(__file__).resolve().parents[2])
    try:
        deadline = time.monotonic() + 60
        while (not path.exists() or path.stat().st_size < 2_000_000) and proc.poll() is None:
            assert time.monotonic() < deadline, "writer made no progress"
            time.sleep(0.05)
        assert proc.poll() is None, "writer exited on its own"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    raw = path.read_bytes()
    # Each op is one write() of a whole line, but SIGKILL can cut a write that crosses a page
    # boundary (Linux checks for a fatal signal between the pages it copies): at most the
    # last line is torn, and the readers drop it as such.
    whole = raw[: raw.rfind(b"\n") + 1]
    assert b"\n" not in raw[len(whole):] and len(raw) - len(whole) < 4096
    ops = read_history(path, allow_torn_tail=True)
    assert len(ops) == whole.count(b"\n") > 1000
    assert_contract(ops)


# ---- the plain encoder (the history's encoder under PyPy) --------------------------------------

_scalars = (st.none() | st.booleans() | st.integers() | st.text()
            | st.floats(allow_nan=True, allow_infinity=True))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4)
                       | st.lists(inner, max_size=3).map(tuple)
                       | st.dictionaries(st.text() | st.integers(), inner, max_size=4),
                       max_leaves=20)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.text(), _values, max_size=6))
def test_the_plain_encoder_writes_what_the_json_module_writes(op):
    """Byte for byte, or it hands the op back (_Unusual) to the json module's encoder."""
    out: list[str] = []
    try:
        history._put(op, out)
    except history._Unusual:
        return
    assert "".join(out) == history._ENCODE(op)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(), _values, max_size=6), st.booleans())
def test_a_line_is_what_json_dumps_writes(op, plain):
    """json_line is json.dumps's text, through the plain encoder (PyPy's) or not (CPython's):
    the simulator writes events.jsonl and invariants.jsonl with it, as json.dumps did."""
    was = history._PLAIN_ENCODER
    history._PLAIN_ENCODER = plain
    try:
        assert history.json_line(op) == json.dumps(op)
    finally:
        history._PLAIN_ENCODER = was


def test_the_plain_encoder_escapes_and_hands_back(monkeypatch):
    monkeypatch.setattr(history, "_PLAIN_ENCODER", True)
    op = {"index": 1, "s": 'q"\\\n\x7f\u00e9\U0001f600', "l": history.EncodedList([1], "[1]"),
          "f": [1.5, -0.0], "t": (True, None)}
    assert history.json_line(op) == history._ENCODE(op)
    for unusual in ({"k": {1: 2}}, {"k": float("nan")}, {"k": {"a": object}}):
        out: list[str] = []
        with pytest.raises(history._Unusual):
            history._put(unusual, out)
    assert history.json_line({"k": {1: 2}}) == '{"k": {"1": 2}}'


# ---- the shapes' templates (CPython's lines of plain ints and strs) ----------------------------

_plain_values = st.integers() | st.booleans() | st.text() | st.none() | st.floats()


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.text(), _plain_values, max_size=8))
def test_a_shapes_template_writes_what_the_json_module_writes(op):
    """json_line through a shape's template (str keys, int and str values; '%' in keys and
    values, escapes, bools and None beside ints) or through json's encoder: the same text,
    the first time a shape is seen and the next."""
    if history._PLAIN_ENCODER:
        pytest.skip("PyPy writes through the plain encoder")
    assert history.json_line(op) == history._ENCODE(op)
    assert history.json_line(op) == history._ENCODE(op)


def test_a_template_given_a_bool_would_write_other_text_than_json():
    # The must-fail twin of the test above: were a bool plain (its class is bool, not int, so
    # a True is another shape and never meets an int's template), %d would write True as 1
    # where json writes true: forced here, the test above would see it.
    op = {"a": 1, "b": "x%s"}
    assert history.json_line(op) == '{"a": 1, "b": "x%s"}'
    shape = (*op, int, str)
    template, strings = history._PLANS[shape]
    assert template % (True, history._string("x%s")) != history._ENCODE({"a": True, "b": "x%s"})
