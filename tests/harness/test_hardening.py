"""Hardening (issue 20): hostile and careless inputs, each met by a clear one-line error (exit 3)
or by the correct verdict -- never by a crash, a wrong verdict, or a write through a planted
file. No Spark or namespaces needed; the attacks by another user on /tmp, a full disk and
simultaneous runs are in test_hardening_root.py."""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from checkers import __main__ as checkers_main
from checkers import ingest as ingest_mod
from checkers import spark as spark_mod
from checkers.check import check_path, output_paths
from checkers.exitcodes import UserError, exit_code
from checkers.ingest import HistoryError, ingest, validate
from checkers.native_ingest import NativeUnsure, native_ingest
from control import files
from control.files import UnsafePathError
from control.inventory import InventoryError, load_inventory
from control.netns_provider import MARKER, NetnsProvider
from harness import store
from harness.config import load_config, typed
from nemesis.lazyfs import mount as lazymount

NOBODY = 65534  # another user's uid, for files "planted" by someone else (we chown as root)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


# -- a small well-formed history ------------------------------------------------------------


def good_ops() -> list[dict]:
    return [
        {"index": 0, "time": 10, "process": 0, "type": "invoke", "f": "send", "partition": 0,
         "value": 5},
        {"index": 1, "time": 20, "process": 0, "type": "ok", "f": "send", "partition": 0,
         "value": 5, "offset": 0, "node": "n2", "epoch": 1},
        {"index": 2, "time": 30, "process": "nemesis", "type": "info", "f": "start-kill",
         "value": {"nodes": ["n2"]}},
        {"index": 3, "time": 40, "process": 1, "type": "invoke", "f": "final-poll",
         "partition": 0, "offset": 0},
        {"index": 4, "time": 50, "process": 1, "type": "ok", "f": "final-poll", "partition": 0,
         "offset": 0, "records": [[0, 5]], "hwm": 1},
    ]  # fmt: skip


def write_lines(path: Path, lines: list[dict | bytes | str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        for line in lines:
            if isinstance(line, dict):
                line = json.dumps(line)
            if isinstance(line, str):
                line = line.encode()
            f.write(line if line.endswith(b"\n") else line + b"\n")
    return path


def run_folder(tmp_path: Path, ops: list | None = None, config: dict | None = None) -> Path:
    run = tmp_path / "run"
    write_lines(run / "history.jsonl", good_ops() if ops is None else ops)
    if config is not None:
        (run / "test.json").write_text(json.dumps({"name": "t", "config": config}))
    return run


# -- broken histories: each is an error naming its line, never a verdict --------------------


def _with(line: int, **fields):
    """Replace fields of op `line` (1-based)."""
    def mutate(ops: list) -> list:
        ops[line - 1] = {**ops[line - 1], **fields}
        return ops
    return mutate


def _append(op: dict | bytes | str):
    return lambda ops: [*ops, op]


def _insert(line: int, op: dict | bytes | str):
    return lambda ops: [*ops[:line - 1], op, *ops[line - 1:]]


STRAY = {"index": 5, "time": 60, "process": 7, "type": "ok", "f": "send", "partition": 0,
         "value": 9, "offset": 1}

# (case, mutation of good_ops(), line of the error, what the error says)
BROKEN_HISTORIES = [
    ("ok without an invoke", _append(STRAY), 6, "completion without an invoke"),
    ("fail without an invoke", _append({**STRAY, "type": "fail"}), 6, "without an invoke"),
    ("client info without an invoke", _append({**STRAY, "type": "info"}), 6, "without an invoke"),
    ("second completion", _append({**good_ops()[1], "index": 5, "time": 60}), 6,
     "without an invoke"),
    ("invoke while one is pending", _insert(2, {**good_ops()[0], "index": 1, "time": 15}), 2,
     "invokes again"),
    ("completion of another f", _with(2, f="poll"), 2, "does not match the invoke on line 1"),
    ("duplicate index", _with(4, index=2), 4, "index 2 does not follow 2"),
    ("index going back", _with(5, index=1), 5, "does not follow"),
    ("negative index", _with(1, index=-1), 1, "'index' is -1, out of range"),
    ("time going back for a process", _with(2, time=5), 2, "time 5 goes back for process 0"),
    ("negative time", _with(1, time=-7), 1, "'time' is -7, out of range"),
    ("float time", _with(1, time=1.5), 1, "'time' must be an integer"),
    ("string time", _with(1, time="10"), 1, "'time' must be an integer"),
    ("negative partition", _with(1, partition=-1), 1, "'partition' is -1, out of range"),
    ("partition past int32", _with(1, partition=2**31), 1, "'partition' is 2147483648"),
    ("value 2**70", _with(1, value=2**70), 1, "'value' is 1180591620717411303424, out of range"),
    ("value -2**63-1", _with(1, value=-(2**63) - 1), 1, "out of range"),
    ("string value", _with(1, value="5"), 1, "send value must be an integer, got '5'"),
    ("boolean value", _with(1, value=True), 1, "send value must be an integer"),
    ("float value", _with(1, value=5.0), 1, "send value must be an integer"),
    ("list value", _with(1, value=[5]), 1, "send value must be an integer"),
    ("negative offset", _with(2, offset=-1), 2, "'offset' is -1"),
    ("offset 2**63", _with(2, offset=2**63), 2, "out of range"),
    ("negative hwm", _with(5, hwm=-3), 5, "'hwm' is -3"),
    ("epoch 2**64", _with(2, epoch=2**64), 2, "'epoch' is 18446744073709551616"),
    ("record value 2**64", _with(5, records=[[0, 2**64]]), 5, "the value a 64-bit integer"),
    ("record negative offset", _with(5, records=[[-1, 5]]), 5, "the offset must be in"),
    ("record not a pair", _with(5, records=[[0]]), 5, "is not an [offset, value] pair"),
    ("record of strings", _with(5, records=[["0", "5"]]), 5, "is not an [offset, value] pair"),
    ("records not a list", _with(5, records={"0": 5}), 5, "'records' must be a list"),
    ("bogus acks", _with(2, acks="2"), 2, "'acks' must be"),
    ("acks as a list", _with(2, acks=["all"]), 2, "'acks' must be"),
    ("process as a list", _with(1, process=[0]), 1, "'process' must be an integer or a string"),
    ("process as a boolean", _with(1, process=True), 1, "'process' must be"),
    ("missing process", _with(1, process=None), 1, "missing 'process'"),
    ("node as an object", _with(2, node={"id": 2}), 2, "'node' must be a string or an integer"),
    ("error as a list", _with(2, error=["timeout"]), 2, "'error' must be a string"),
    ("unknown type", _with(1, type="done"), 1, "unknown type 'done'"),
    ("empty f", _with(1, f=""), 1, "'type' and 'f' must be strings"),
    ("missing index", _with(1, index=None), 1, "missing 'index'"),
    ("binary junk", _insert(3, b"\x00\x9f\xffMZ\x90\x00\x03junk\x01\x02"), 3, "invalid JSON"),
    ("not UTF-8", _insert(3, b'{"index": 2, "process": "\xff\xfe"}'), 3, "invalid JSON"),
    ("lone surrogate", _insert(3, '{"index": 2, "time": 25, "process": "\\ud800", "type": '
                                  '"info", "f": "x"}'), 3, "not valid Unicode"),
    ("NUL bytes", _insert(3, b"\x00" * 64), 3, "invalid JSON"),
    ("NaN time", _insert(3, '{"index": 2, "time": NaN, "process": "nemesis", "type": "info", '
                            '"f": "x"}'), 3, "'time' must be an integer"),
    ("nested 100000 deep", _insert(3, "[" * 100_000 + "]" * 100_000), 3, "invalid JSON"),
    ("integer of 5000 digits", _insert(3, '{"index": ' + "9" * 5000 + "}"), 3, "invalid JSON"),
    ("JSON array line", _insert(3, "[1, 2, 3]"), 3, "not a JSON object"),
    ("JSON null line", _insert(3, "null"), 3, "not a JSON object"),
    ("3 MB junk line", _insert(3, b"x" * (3 << 20)), 3, "invalid JSON"),
    # the rest of the contract (docs/architecture.md, "History")
    ("indexes not from 0", lambda ops: [{**o, "index": o["index"] + 1} for o in ops], 1,
     "the first index is 1"),
    ("indexes with a gap", _with(5, index=9), 5, "index 9 does not follow 3"),
    ("time going back across processes", _append(
        {"index": 5, "time": 45, "process": 3, "type": "invoke", "f": "poll", "partition": 0,
         "offset": 0}), 6, "time 45 goes back: line 5 was at 50"),
    ("a nemesis invoke", _with(3, type="invoke"), 3, "the nemesis writes only 'info' ops"),
    ("a nemesis op of another f", _with(3, f="kill"), 3, "the nemesis writes only 'info' ops"),
    ("a client f that is none of ours", _with(1, f="produce"), 1, "unknown f 'produce'"),
    ("fail without an error", _with(2, type="fail"), 2, "a 'fail' carries an 'error'"),
    ("ok final-poll without records", lambda ops: [*ops[:4], {k: v for k, v in ops[4].items()
                                                               if k != "records"}], 5,
     "an ok final-poll carries its 'records'"),
    ("final-poll complete as a string", _with(5, complete="yes"), 5,
     "'complete' must be true or false"),
    ("completion of another partition", _with(2, partition=1), 2,
     "'partition' is 1, but its invoke on line 1 has 0"),
    ("completion of another value", _with(2, value=6), 2, "'value' is 6, but its invoke"),
    ("read completion from another offset", _with(5, offset=3), 5,
     "'offset' is 3, but its invoke on line 4 has 0"),
    ("completion of another txn", lambda ops: _with(2, txn=8)(_with(1, txn=7)(ops)), 2,
     "'txn' is 8, but its invoke on line 1 has 7"),
    ("a process used again after an info", lambda ops: _append(
        {"index": 5, "time": 60, "process": 0, "type": "invoke", "f": "send", "partition": 0,
         "value": 6})(_with(2, type="info")(ops)), 6,
     "process 0 is used again after its 'info' on line 2"),
]


@pytest.mark.parametrize(("case", "mutate", "line", "says"), BROKEN_HISTORIES,
                         ids=[c[0] for c in BROKEN_HISTORIES])
def test_a_broken_history_is_an_error_naming_its_line(tmp_path, capsys, case, mutate, line, says):
    run = run_folder(tmp_path, mutate(good_ops()))
    history = run / "history.jsonl"
    with pytest.raises(HistoryError) as err:
        validate(history)
    assert err.value.total >= 1
    assert err.value.errors[0].startswith(f"{history}:{line}: "), err.value.errors
    assert says in err.value.errors[0], err.value.errors
    # The command line: exit 3 (an error, never a verdict), the line on stderr, and a
    # results.json that records the errors.
    assert checkers_main.main([str(run)]) == 3
    assert f"{history}:{line}: " in capsys.readouterr().err
    results = json.loads((run / "results.json").read_text())
    assert results["errors"] and exit_code(results) == 3


@pytest.mark.parametrize(("case", "mutate", "line", "says"), BROKEN_HISTORIES,
                         ids=[c[0] for c in BROKEN_HISTORIES])
def test_the_native_reader_defers_every_broken_history(tmp_path, case, mutate, line, says):
    """The native path's screen is the only thing between a broken line and a verdict: it
    must hand every broken history to the exact path, which names the line."""
    history = run_folder(tmp_path, mutate(good_ops())) / "history.jsonl"
    (tmp_path / "pq").mkdir()
    with pytest.raises(NativeUnsure):
        native_ingest(history, tmp_path / "pq" / "ops.parquet", tmp_path / "pq" / "reads.parquet",
                      ingest_mod.MAX_LINE_BYTES, None)


def test_partitions_past_the_topic_are_an_error(tmp_path):
    ops = good_ops()
    ops[3]["partition"] = ops[4]["partition"] = 2  # the topic of test.json has 2 partitions
    run = run_folder(tmp_path, ops, {"topic": {"name": "t", "partitions": 2}})
    results = check_path(run, backend="reference")
    assert exit_code(results) == 3
    assert results["errors"][0].endswith(":4: 'partition' is 2, out of range [0, 1]")


def test_an_overlong_line_is_skipped_in_bounded_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(ingest_mod, "MAX_LINE_BYTES", 1000)
    run = run_folder(tmp_path, _insert(3, b"{" + b" " * 50_000 + b"}")(good_ops()))
    with pytest.raises(HistoryError) as err:
        validate(run / "history.jsonl")
    assert err.value.total == 1  # the rest of the long line is not read as more lines
    assert err.value.errors[0].endswith(":3: line longer than 1000 bytes")


def test_a_history_of_nothing_but_junk_reports_a_bounded_number_of_errors(tmp_path):
    junk = [os.urandom(200).replace(b"\n", b"") for _ in range(500)]
    path = write_lines(tmp_path / "junk.jsonl", junk)
    with pytest.raises(HistoryError) as err:
        validate(path)
    assert err.value.total == 500 and len(err.value.errors) == ingest_mod.MAX_REPORTED_ERRORS


# Well-formed histories that look odd must still pass (controls, not hostile cases).
GOOD_VARIANTS = [
    ("as written", lambda ops: ops),
    ("an invoke still pending at the end (a crashed run)",
     _append({"index": 5, "time": 60, "process": 2, "type": "invoke", "f": "send",
              "partition": 0, "value": 6})),
    ("a nemesis value past 64 bits", _with(3, value={"huge": 2**70})),
    ("a Jepsen op's parts, back to its start, after its info", lambda ops: [*ops, *(
        {"index": 5 + i, "time": 60 + 10 * (i % 2), "process": 2, "type": typ, "f": "send",
         "partition": 0, "value": 7 + i // 2, "txn": 9}
        for i, typ in enumerate(["invoke", "info", "invoke", "info"]))]),
    ("a fail with its error, an ok send without an offset (acks=0)", lambda ops: [*ops, *(
        {"index": 5 + i, "time": 60 + i, "process": 4, "type": typ, "f": "send",
         "partition": 0, "value": 10 + i // 2, **extra}
        for i, (typ, extra) in enumerate([("invoke", {}), ("fail", {"error": "NOT_LEADER"}),
                                          ("invoke", {}), ("ok", {"node": 2, "epoch": 1})]))]),
    ("a final-poll's complete and an op's extra field", _with(5, complete=True, extra=[1])),
    ("acks written as -1", _with(2, acks=-1)),
    ("a process named by a string", lambda ops: [{**o, "process": "p0"} if o["process"] == 0
                                                 else o for o in ops]),
    ("blank lines", _insert(3, "   ")),
]


@pytest.mark.parametrize(("case", "mutate"), GOOD_VARIANTS, ids=[c[0] for c in GOOD_VARIANTS])
def test_odd_but_well_formed_histories_pass(tmp_path, case, mutate):
    run = run_folder(tmp_path, mutate(good_ops()))
    assert validate(run / "history.jsonl") == []
    assert ingest(run / "history.jsonl", tmp_path / "exact", native=False).ops >= 5


@pytest.mark.native
@pytest.mark.parametrize(("case", "mutate"), GOOD_VARIANTS, ids=[c[0] for c in GOOD_VARIANTS])
def test_odd_but_well_formed_histories_are_read_natively_as_exactly(tmp_path, case, mutate):
    run = run_folder(tmp_path, mutate(good_ops()))
    res = ingest(run / "history.jsonl", tmp_path / "pq")
    assert res.ops >= 5 and res.path == "native"
    # the native path's tables are the exact path's
    exact = ingest(run / "history.jsonl", tmp_path / "exact", native=False)
    for native_table, exact_table in ((res.ops_path, exact.ops_path),
                                      (res.reads_path, exact.reads_path)):
        assert pq.read_table(native_table).equals(pq.read_table(exact_table)), res.path


def test_a_torn_last_line_is_still_a_note(tmp_path):
    run = run_folder(tmp_path)
    with open(run / "history.jsonl", "ab") as f:
        f.write(b'{"index": 5, "time": 6')
    notes = validate(run / "history.jsonl")
    assert len(notes) == 1 and "last line is truncated" in notes[0]


def test_a_crashed_runs_history_is_still_checked(tmp_path):
    """A run killed mid-write: invokes without completions and the last line cut short. The
    contract holds for what is there, so it gets a verdict (not an error), on both readers."""
    ops = [*good_ops(),
           {"index": 5, "time": 60, "process": 2, "type": "invoke", "f": "send", "partition": 0,
            "value": 6},
           {"index": 6, "time": 70, "process": 3, "type": "invoke", "f": "poll", "partition": 0,
            "offset": 0}]
    run = run_folder(tmp_path, ops)
    with open(run / "history.jsonl", "ab") as f:
        f.write(b'{"index": 7, "time": 80, "process": 2, "type": "o')
    assert "last line is truncated" in validate(run / "history.jsonl")[0]
    for native in (True, False):
        res = ingest(run / "history.jsonl", tmp_path / f"pq-{native}", native=native)
        assert res.ops == 7 and len(res.notes) == 1
    results = check_path(run, backend="reference")
    assert exit_code(results) != 3 and "errors" not in results
    assert any("last line is truncated" in n for n in results["notes"])


def test_harness_check_refuses_a_history_that_breaks_the_contract_in_one_line(tmp_path):
    """As a real process: a completion whose partition is not its invoke's is exit 3 and one
    line on stderr naming it, with no traceback."""
    run = run_folder(tmp_path, _with(2, partition=1)(good_ops()))
    done = subprocess.run([sys.executable, "-m", "harness.cli", "check", str(run),
                           "--in-process"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].endswith("history.jsonl:2: 'partition' is 1, but its invoke on line 1 "
                             "has 0 (a completion repeats its invoke's fields)")


def test_the_cli_exits_3_on_value_2_to_the_70(tmp_path):
    """The reported crash (OverflowError escaping ingest, exit 1) as a real process."""
    run = run_folder(tmp_path, _with(1, value=2**70)(good_ops()))
    done = subprocess.run([sys.executable, "-m", "checkers", str(run)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    assert "history.jsonl:1: 'value' is 1180591620717411303424, out of range" in done.stderr
    assert "Traceback" not in done.stderr


# -- malformed test.json: one line, exit 3 ---------------------------------------------------

BAD_TEST_JSON = [
    ("not JSON", b"{\n  bad", "not a valid test.json"),
    ("a JSON array", b"[]", "not a JSON object"),
    ("not UTF-8", b"\xff\xfe\x00{junk", "not a valid test.json"),
    ("nested 100000 deep", b"[" * 100_000, "not a valid test.json"),
    ("config a list", b'{"config": []}', "config must be an object"),
    ("checker a number", b'{"config": {"checker": 5}}', "config.checker must be a table"),
    ("allow a string", b'{"config": {"checker": {"allow": "lost-write"}}}',
     "config.checker.allow must be a list"),
    ("acks 2", b'{"config": {"workload": {"acks": "2"}}}', "config.workload.acks must be"),
    ("acks a list", b'{"config": {"workload": {"acks": ["all"]}}}', "config.workload.acks"),
    ("partitions a string", b'{"config": {"topic": {"partitions": "3"}}}',
     "config.topic.partitions must be a positive integer"),
    ("partitions 0", b'{"config": {"topic": {"partitions": 0}}}', "config.topic.partitions"),
    ("topic name a list", b'{"config": {"topic": {"name": ["t"]}}}', "config.topic.name"),
    ("spark_master a number", b'{"config": {"checker": {"spark_master": 7}}}',
     "config.checker.spark_master"),
]


@pytest.mark.parametrize(("case", "body", "says"), BAD_TEST_JSON, ids=[c[0] for c in BAD_TEST_JSON])
def test_a_malformed_test_json_is_one_line_exit_3(tmp_path, capsys, case, body, says):
    run = run_folder(tmp_path)
    (run / "test.json").write_bytes(body)
    assert checkers_main.main([str(run)]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("python -m checkers: error: "), err
    assert str(run / "test.json") in err and says in err
    assert not (run / "results.json").exists()


def test_a_test_json_that_is_a_directory_is_one_line_exit_3(tmp_path, capsys):
    run = run_folder(tmp_path)
    (run / "test.json").mkdir()
    assert checkers_main.main([str(run)]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "test.json: cannot read it" in err


def test_a_missing_history_is_one_line_exit_3(tmp_path, capsys):
    (tmp_path / "empty" / "history.jsonl").mkdir(parents=True)  # a folder, not a history
    assert checkers_main.main([str(tmp_path / "empty")]) == 3
    assert capsys.readouterr().err == \
        f"python -m checkers: error: no history at {tmp_path / 'empty' / 'history.jsonl'}\n"


# -- files planted beside a history: never written through, never in the way ----------------


def canary(tmp_path: Path) -> Path:
    c = tmp_path / "elsewhere" / "canary"
    c.parent.mkdir(exist_ok=True)
    c.write_text("precious")
    return c


def test_a_file_named_parquet_in_the_run_folder_still_gets_a_verdict(tmp_path):
    run = run_folder(tmp_path)
    (run / "parquet").write_text("my notes")
    results = check_path(run, backend="reference")
    assert results["valid"] is True and exit_code(results) == 0
    assert (run / "parquet").read_text() == "my notes"
    assert not [p for p in run.iterdir() if p.name.startswith(".")]  # scratch removed


@pytest.mark.parametrize("name", ["parquet", "results.json", "loss.parquet", "results.json.tmp"])
def test_symlinks_planted_in_the_run_folder_are_not_written_through(tmp_path, name):
    run = run_folder(tmp_path)
    target = canary(tmp_path)
    (run / name).symlink_to(target.parent if name == "parquet" else target)
    results = check_path(run, backend="reference")
    assert results["valid"] is True
    assert target.read_text() == "precious"
    assert sorted(p.name for p in target.parent.iterdir()) == ["canary"]
    for out in ("results.json", "loss.parquet"):
        assert (run / out).is_file() and not (run / out).is_symlink()


def test_a_bare_history_never_replaces_another_historys_results(tmp_path):
    run = run_folder(tmp_path)
    theirs = check_path(run, backend="reference")
    before = (run / "results.json").read_bytes()
    mine = write_lines(run / "mydata.jsonl", _with(1, value=2**70)(good_ops()))
    results = check_path(mine, backend="reference")
    assert exit_code(results) == 3 and exit_code(theirs) == 0
    assert (run / "results.json").read_bytes() == before
    assert output_paths(mine) == (run / "mydata.results.json", run / "mydata.loss.parquet")
    assert json.loads((run / "mydata.results.json").read_text())["history"] == "mydata.jsonl"
    # checking it again replaces its own results
    write_lines(mine, good_ops())
    assert check_path(mine, backend="reference")["valid"] is True
    assert (run / "results.json").read_bytes() == before


@pytest.mark.parametrize("existing", ['{"history": "mydata.json", "valid": true}', "my notes",
                                      '["not", "results"]'])
def test_results_of_another_history_with_the_same_stem_are_refused(tmp_path, capsys, existing):
    mine = write_lines(tmp_path / "mydata.jsonl", good_ops())
    (tmp_path / "mydata.results.json").write_text(existing)
    with pytest.raises(UserError, match="not replacing it"):
        check_path(mine, backend="reference")
    assert checkers_main.main([str(mine)]) == 3
    assert capsys.readouterr().err.count("\n") == 1
    assert (tmp_path / "mydata.results.json").read_text() == existing


def test_two_checks_of_one_folder_at_once_both_finish(tmp_path):
    run = run_folder(tmp_path)
    got: list = []
    threads = [threading.Thread(target=lambda: got.append(check_path(run, backend="reference")))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r["valid"] for r in got] == [True] * 4
    assert json.loads((run / "results.json").read_text())["valid"] is True


# -- control.files: atomic writes and private directories -----------------------------------


def test_an_atomic_write_replaces_a_symlink_instead_of_following_it(tmp_path):
    target = canary(tmp_path)
    link = tmp_path / "out.json"
    link.symlink_to(target)
    files.write_text_atomic(link, "new")
    assert target.read_text() == "precious" and link.read_text() == "new" and not link.is_symlink()


def test_a_failed_atomic_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "results.json"
    path.write_text("old")
    with pytest.raises(OSError, match="No space"), files.atomic_output(path) as f:
        f.write(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["results.json"]


def test_private_dirs_refuse_symlinks_and_loose_modes(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(UnsafePathError, match="is a symlink"):
        files.private_dir(tmp_path / "link")
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o755)
    with pytest.raises(UnsafePathError, match="accessible to other users"):
        files.private_dir(loose)
    (tmp_path / "file").write_text("")
    with pytest.raises(UnsafePathError, match="not a directory"):
        files.private_dir(tmp_path / "file")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # writable by all and not sticky: anyone could swap what is below
    with pytest.raises(UnsafePathError, match="writable by other users"):
        files.private_dir(shared / "mine")
    assert stat.S_IMODE(files.private_dir(tmp_path / "fresh").stat().st_mode) == 0o700


@needs_root
def test_private_dirs_refuse_another_users_directory(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(UnsafePathError, match=f"owned by uid {NOBODY}"):
        files.private_dir(theirs)
    under = tmp_path / "parent"
    under.mkdir(mode=0o755)
    os.chown(under, NOBODY, NOBODY)
    with pytest.raises(UnsafePathError, match=f"owned by uid {NOBODY}: refusing"):
        files.private_dir(under / "mine")
    assert not files.remove_private_dir(theirs) and theirs.exists()


def test_remove_private_dir_removes_only_marked_dirs_of_ours_and_never_follows(tmp_path):
    target = canary(tmp_path)
    d = tmp_path / "cluster"
    d.mkdir()
    (d / "link").symlink_to(target.parent)
    assert not files.remove_private_dir(d, MARKER) and d.exists()  # no marker
    (d / MARKER).write_text("")
    (tmp_path / "dirlink").symlink_to(d)
    assert not files.remove_private_dir(tmp_path / "dirlink", MARKER)
    assert files.remove_private_dir(d, MARKER) and not d.exists()
    assert target.read_text() == "precious"


# -- netns cluster directories ---------------------------------------------------------------


def test_a_cluster_dir_that_is_a_symlink_is_refused(tmp_path):
    target = canary(tmp_path)
    (tmp_path / "c").symlink_to(target.parent)
    with pytest.raises(FileExistsError, match="not a directory"):
        NetnsProvider(tmp_path / "c", 1)._prepare_dir()
    assert target.read_text() == "precious"


def test_an_old_cluster_dir_is_emptied_without_following_symlinks(tmp_path):
    target = canary(tmp_path)
    d = tmp_path / "c"
    (d / "n1" / "data").mkdir(parents=True)
    (d / MARKER).write_text("")
    (d / "n1" / "data" / "evil").symlink_to(target.parent)
    (d / "ssh").symlink_to(target.parent)
    d.chmod(0o755)
    NetnsProvider(d, 1)._prepare_dir()
    assert sorted(os.listdir(d)) == [MARKER] and stat.S_IMODE(d.stat().st_mode) == 0o700
    assert target.read_text() == "precious"


@needs_root
def test_a_cluster_dir_another_user_made_is_refused(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / MARKER).write_text("")
    (theirs / "keep").write_text("x")
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(UnsafePathError, match=f"owned by uid {NOBODY}"):
        NetnsProvider(theirs, 1)._prepare_dir()
    assert (theirs / "keep").exists()
    parent = tmp_path / "kch"  # like a /tmp/kch someone else created
    parent.mkdir(mode=0o777)
    os.chown(parent, NOBODY, NOBODY)
    with pytest.raises(UnsafePathError, match=f"{parent} is owned by uid {NOBODY}"):
        NetnsProvider(parent / "run", 1)._prepare_dir()
    assert os.listdir(parent) == []


def test_temporary_cluster_dirs_are_unique_private_and_named_after_the_run():
    providers = [NetnsProvider(None, 1, prefix="kch-20261122T063015-s7-") for _ in range(2)]
    assert all(p.temporary for p in providers)
    dirs = [files.make_private_tempdir(p._prefix) for p in providers]
    try:
        assert dirs[0] != dirs[1]
        assert all(d.name.startswith("kch-20261122T063015-s7-") for d in dirs)
        assert all(stat.S_IMODE(d.stat().st_mode) == 0o700 for d in dirs)
    finally:
        for d in dirs:
            d.rmdir()


# -- the lazyfs registry ---------------------------------------------------------------------


def test_the_registry_refuses_a_symlink_or_a_loose_directory(tmp_path, monkeypatch):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    monkeypatch.setenv("LAZYFS_RUN_DIR", str(tmp_path / "link"))
    with pytest.raises(UnsafePathError, match="symlink"):
        lazymount.registry_file("/mnt/x")
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)
    monkeypatch.setenv("LAZYFS_RUN_DIR", str(loose))
    with pytest.raises(UnsafePathError, match="accessible to other users"):
        lazymount.registry_dir()


def test_the_default_registry_is_not_a_fixed_name_in_tmp(monkeypatch):
    monkeypatch.delenv("LAZYFS_RUN_DIR", raising=False)
    if os.geteuid() == 0:
        assert lazymount.registry_dir() == lazymount.ROOT_REGISTRY
    else:
        assert lazymount.registry_dir().endswith(f"lazyfs-mounts-{os.geteuid()}")
    assert stat.S_IMODE(os.stat(lazymount.registry_dir()).st_mode) == 0o700


def test_stale_registry_entries_are_pruned(tmp_path, monkeypatch):
    reg = tmp_path / "reg"
    monkeypatch.setenv("LAZYFS_RUN_DIR", str(reg))
    lazymount.registry_dir()
    # A process that looks like a live daemon (its argv names nemesis.lazyfs mount).
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                             "nemesis.lazyfs", "mount"])
    try:
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        entries = {"live.json": {"pid": live.pid}, "dead.json": {"pid": dead.pid},
                   "notours.json": {"pid": os.getpid()}, "boolpid.json": {"pid": True},
                   "junk.json": "not json", "list.json": [1]}
        for name, body in entries.items():
            (reg / name).write_text(body if isinstance(body, str) else json.dumps(body))
        (reg / ".old.json.x.tmp").write_text("")
        old = time.time() - 3600
        os.utime(reg / ".old.json.x.tmp", (old, old))
        (reg / ".new.json.y.tmp").write_text("")
        removed = {Path(p).name for p in lazymount.prune_registry()}
        assert removed == {"dead.json", "notours.json", "boolpid.json", "junk.json", "list.json",
                           ".old.json.x.tmp"}
        assert sorted(os.listdir(reg)) == [".new.json.y.tmp", "live.json"]
    finally:
        live.kill()
        live.wait()


def test_registry_writes_replace_planted_symlinks(tmp_path, monkeypatch):
    target = canary(tmp_path)
    monkeypatch.setenv("LAZYFS_RUN_DIR", str(tmp_path / "reg"))
    entry = lazymount.registry_file("/mnt/x")
    Path(entry).symlink_to(target)
    lazymount.write_json(entry, {"pid": 1})
    assert target.read_text() == "precious" and json.loads(Path(entry).read_text()) == {"pid": 1}
    Path(entry).unlink()
    Path(entry).symlink_to(target)
    assert lazymount._read_registry("/mnt/x") is None  # not read through a symlink either


# -- the checker's Spark configuration -------------------------------------------------------


def test_the_log4j_file_is_private_and_never_at_a_fixed_name(tmp_path, monkeypatch):
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    monkeypatch.setattr(spark_mod, "_private", None)
    target = canary(tmp_path)
    planted = shared / f"harness-checker-log4j2-{os.getuid()}.properties"
    planted.symlink_to(target)
    path = spark_mod._log4j_file()
    try:
        assert path.parent.parent == shared and path.parent.name.startswith("harness-checker-")
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert path.read_text() == spark_mod._LOG4J and target.read_text() == "precious"
        assert spark_mod._log4j_file() == path  # one directory per process
    finally:
        files.remove_private_dir(path.parent)


# -- inventories -----------------------------------------------------------------------------

BASE_INVENTORY = {"name": "n1", "address": "10.0.0.1", "key_file": "k", "known_hosts": "kh"}
BAD_INVENTORY_VALUES = [
    ("name", "/var/lib/mysql"), ("name", ".."), ("name", "."), ("name", "n1/../../etc"),
    ("name", "a b"), ("name", ""), ("name", "-rf"), ("name", "n1\n"), ("name", "x" * 64),
    ("user", "root; rm -rf /"), ("user", ""), ("user", "-oProxyCommand=x"), ("user", "$(id)"),
    ("address", "a b"), ("address", "-oProxyCommand=touch /tmp/x"), ("address", ""),
    ("work_dir", "relative/kch"), ("work_dir", "/"), ("work_dir", "/var/lib"),
    ("work_dir", "/etc"), ("work_dir", "/srv/kch/../../etc"), ("work_dir", "/srv//kch"),
    ("work_dir", "/srv/kch/"), ("work_dir", "/srv/./kch"), ("work_dir", "/srv/k\nch"),
    ("python", "python3 -c 'import os'"), ("python", "-c"), ("python", "py;id"),
]


def _inventory(tmp_path: Path, **host) -> Path:
    body = "[[hosts]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in
                                   {**BASE_INVENTORY, **host}.items())
    path = tmp_path / "inventory.toml"
    path.write_text(body)
    return path


@pytest.mark.parametrize(("key", "value"), BAD_INVENTORY_VALUES,
                         ids=[f"{k}={v!r}" for k, v in BAD_INVENTORY_VALUES])
def test_inventory_values_that_would_reach_paths_or_commands_are_refused(tmp_path, key, value):
    path = _inventory(tmp_path, **{key: value})
    with pytest.raises(InventoryError, match=rf"hosts\[0\]\.{key}: ") as err:
        load_inventory(path)
    assert str(err.value).startswith(f"{path}: ")


def test_ordinary_inventory_values_still_load(tmp_path):
    path = _inventory(tmp_path, name="kafka-1.lab_a", user="vagrant", address="fe80::1%eth0",
                      work_dir="/var/lib/kch", python="/opt/kch/.venv/bin/python")
    (entry,) = load_inventory(path)
    assert str(entry.work_dir / entry.name / "data") == "/var/lib/kch/kafka-1.lab_a/data"


# -- run folders and results/latest ----------------------------------------------------------


def test_a_run_that_cannot_write_test_json_leaves_no_folder_and_no_latest(tmp_path, monkeypatch):
    config = load_config(sets=["seed=3"])
    first = store.new_run(tmp_path, typed(config), ["harness"], started_at=1.0e9)

    def full_disk(*a, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(store, "write_test_json", full_disk)
    with pytest.raises(OSError, match="No space"):
        store.new_run(tmp_path, typed(config), ["harness"], started_at=1.0e9)
    assert [p.name for p in first.parent.iterdir()] == [first.name]
    assert (tmp_path / "latest").resolve() == first.resolve()


def test_a_real_latest_directory_is_refused_before_a_run_folder_is_made(tmp_path):
    (tmp_path / "latest").mkdir()
    with pytest.raises(FileExistsError, match="not a symlink"):
        store.new_run(tmp_path, typed(load_config(sets=["seed=3"])), ["harness"])
    assert sorted(os.listdir(tmp_path)) == ["latest"]


def test_new_run_without_latest_leaves_the_link_alone(tmp_path):
    config = load_config(sets=["seed=3"])
    first = store.new_run(tmp_path, typed(config), ["harness"], started_at=1.0e9)
    second = store.new_run(tmp_path, typed(config), ["harness"], started_at=1.0e9, latest=False)
    assert second != first and (tmp_path / "latest").resolve() == first.resolve()


def test_a_run_that_never_got_its_hosts_does_not_become_latest(tmp_path, monkeypatch):
    from harness import runner
    from harness.test import Test

    config = load_config(sets=["seed=3"])
    earlier = store.new_run(tmp_path, typed(config), ["harness"], started_at=1.0e9)

    def no_slot(*a, **kw):
        raise RuntimeError("all 256 network slots are held by live clusters")
    monkeypatch.setattr(runner.cleanup, "cleanup_stale", lambda: [])
    monkeypatch.setattr(runner, "make_provider", no_slot)
    with pytest.raises(RuntimeError, match="network slots"):
        runner.run_test(Test.of(config, tmp_path))
    assert (tmp_path / "latest").resolve() == earlier.resolve()


@pytest.mark.parametrize("body", [b"", b"{oops", b"[]", b"\xff\xfe"])
def test_a_malformed_results_json_is_an_error_not_a_verdict(tmp_path, body):
    (tmp_path / "results.json").write_bytes(body)
    with pytest.raises(ValueError, match="not a valid results.json"):
        store.verdict_exit(tmp_path)
