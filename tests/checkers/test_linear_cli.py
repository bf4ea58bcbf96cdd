"""`python -m checkers.linear`: verdict JSON and exit status; kv partitions on Spark."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
from support.linear_simulate import simulate

from checkers.linear import KV, Budget, check, pair_events
from checkers.linear.check import run_local, run_local_all
from checkers.linear.parallel import spark_runner


def write_jsonl(path, events):
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def run_cli(*args):
    proc = subprocess.run([sys.executable, "-m", "checkers.linear", *map(str, args)],
                          capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def register_events(last_read):
    return [{"index": i, "process": p, "type": t, "f": f, "value": v} for i, (p, t, f, v) in
            enumerate([(0, "invoke", "write", 1), (0, "ok", "write", 1),
                       (1, "invoke", "read", None), (1, "ok", "read", last_read)])]


@pytest.mark.parametrize("last_read, code, valid", [(1, 0, True), (2, 1, False)])
def test_exit_status_and_verdict(tmp_path, last_read, code, valid):
    path = write_jsonl(tmp_path / "h.jsonl", register_events(last_read))
    rc, out, _ = run_cli(path, "--model", "register")
    assert rc == code
    verdict = json.loads(out)
    assert verdict["valid"] is valid and verdict["model"] == "register" and verdict["ops"] == 2


def test_budget_exhausted_exits_2(tmp_path):
    # 16 concurrent writes, any subset of which may precede the write of "x" that a read
    # returns; a later read of the earlier "y" then fails: 2**16 configurations to rule out
    n = 16
    rows = [(n + 2, "invoke", "write", "y"), (n + 2, "ok", "write", "y")]
    rows += [(p, "invoke", "write", p) for p in range(n)]
    rows += [(n, "invoke", "write", "x"), (n + 1, "invoke", "read", None),
             (n + 1, "ok", "read", "x"), (n + 3, "invoke", "read", None),
             (n + 3, "ok", "read", "y"), (n, "ok", "write", "x")]
    rows += [(p, "ok", "write", p) for p in range(n)]
    events = [{"process": p, "type": t, "f": f, "value": v} for p, t, f, v in rows]
    path = write_jsonl(tmp_path / "h.jsonl", events)
    rc, out, _ = run_cli(path, "--model", "cas-register", "--max-states", "1000")
    assert rc == 2
    assert json.loads(out)["valid"] == "unknown"


def test_bad_input_exits_3_naming_the_line(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text('{"process": 0, "type": "invoke", "f": "read"}\n{"process": 0, "type": "ok"}\n')
    rc, out, err = run_cli(path, "--model", "register")
    assert rc == 3 and out == ""
    assert f"{path}:2: missing field 'f'" in err


def test_usage_error_exits_3(tmp_path):
    rc, _, err = run_cli(tmp_path / "h.jsonl", "--model", "queue")
    assert rc == 3 and "invalid choice" in err


def test_kv_in_process(tmp_path):
    events = simulate(random.Random(2), 200, 4, keys=["a", "b"])
    path = write_jsonl(tmp_path / "h.jsonl", events)
    rc, out, _ = run_cli(path, "--model", "kv", "--in-process", "--budget-s", "60")
    assert rc == 0
    assert json.loads(out)["partitions"] == 2


def corrupted_kv(seed: int, bad_key: str) -> list[dict]:
    events = simulate(random.Random(seed), 600, 6, keys=list("abcdefgh"), info_rate=0.05)
    read = next(e for e in events
                if e["type"] == "ok" and e["f"] == "read" and e["value"][0] == bad_key)
    read["value"][1] = 42  # never written: values are 0..4
    return events


@pytest.mark.spark
def test_kv_partitions_on_spark_match_in_process():
    events = corrupted_kv(11, "f")
    # every key searched to the end in this process, as each Spark task does
    local = check(pair_events(events), KV(), Budget.of(120), run_local_all)
    on_spark = check(pair_events(events), KV(), Budget.of(120), spark_runner("local[2]", 0))
    assert local["valid"] is False and local["invalid_keys"] == ["f"]
    for field in ("valid", "partitions", "explored", "failure", "invalid_keys", "ops"):
        assert on_spark[field] == local[field], field


def test_in_process_search_stops_at_the_first_invalid_key():
    events = corrupted_kv(11, "f")
    first = check(pair_events(events), KV(), Budget.of(120), run_local)
    every = check(pair_events(events), KV(), Budget.of(120), run_local_all)
    assert first["valid"] is every["valid"] is False
    assert first["invalid_keys"] == every["invalid_keys"] == ["f"]
    assert first["failure"] == every["failure"]
    assert first["explored"] <= every["explored"]


def test_small_kv_histories_skip_spark(tmp_path):
    events = simulate(random.Random(3), 100, 3, keys=["a", "b"])
    verdict = check(pair_events(events), KV(), Budget.of(60), spark_runner("local[2]"))
    assert verdict["valid"] is True and verdict["engine"] == "in-process"
