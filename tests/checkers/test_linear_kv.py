"""The kv model with get/put/append (Porcupine's), initial values, the nil-read conventions,
Porcupine's kv corpus, and `harness check --model kv` run from outside the repository."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checkers.linear import KV, AppendRegister, check, check_file, pair_events, search
from checkers.linear.importers import read_events
from checkers.linear.models import CASRegister, Register, make_model

DATA = Path(__file__).resolve().parents[1] / "data" / "kv"
REPO = Path(__file__).resolve().parents[2]
HARNESS = Path(sys.executable).parent / "harness"
MIRROR = Path(os.environ.get("PORCUPINE_DIR", "/work/.mirror/anishathalye+porcupine/repo"))


def events(*rows):
    return [{"process": p, "type": t, "f": f, "value": v} for p, t, f, v in rows]


# -- the model ---------------------------------------------------------------------------

def test_append_register_steps():
    m = AppendRegister()
    assert m.init() == ""
    assert m.step("ab", ("append", "c"), None) == (True, "abc")
    assert m.step("ab", ("put", "z"), None) == (True, "z")
    assert m.step("ab", ("get", None), "ab") == (True, "ab")
    assert m.step("ab", ("get", None), "a")[0] is False
    assert AppendRegister(initial=()).step((1,), ("append", (2,)), None) == (True, (1, 2))


@pytest.mark.parametrize("name, valid", [("append-ok.txt", True), ("append-bad.txt", False)])
def test_committed_kv_histories(name, valid):
    verdict = check_file(DATA / name, "kv")
    assert verdict["valid"] is valid
    if not valid:
        assert verdict["invalid_keys"] == ["a"]
        assert verdict["failure"]["op"]["output"] == "yx"


def test_porcupine_edn_lines_in_a_txt_file_are_read_as_edn():
    first = read_events(DATA / "append-ok.txt")[0][1]
    assert first == {"process": 0, "type": "invoke", "f": "put", "key": "a", "value": "x"}


def test_kv_picks_its_registers_from_the_ops():
    model = make_model("kv")
    check(pair_events(events((0, "invoke", "get", ["k", None]), (0, "ok", "get", ["k", ""]))),
          model)
    assert isinstance(model.inner, AppendRegister)
    model = make_model("kv")
    check(pair_events(events((0, "invoke", "read", ["k", None]), (0, "ok", "read", ["k", None]))),
          model)
    assert type(model.inner) is CASRegister


def test_kv_rejects_mixed_register_kinds():
    rows = events((0, "invoke", "get", ["k", None]), (0, "ok", "get", ["k", ""]),
                  (0, "invoke", "write", ["k", 1]), (0, "ok", "write", ["k", 1]))
    with pytest.raises(ValueError, match="mixes get/put/append with read/write/cas"):
        check(pair_events(rows), KV())


READ_ZERO = events((0, "invoke", "read", None), (0, "ok", "read", 0),
                   (0, "invoke", "write", 1), (0, "ok", "write", 1))


@pytest.mark.parametrize("initial, valid", [(None, False), (0, True), (1, False)])
def test_initial_value_of_a_register(initial, valid):
    model = make_model("cas-register") if initial is None else make_model("cas-register",
                                                                           initial=initial)
    assert check(pair_events(READ_ZERO), model)["valid"] is valid


def test_initial_value_of_kv_registers():
    rows = events((0, "invoke", "get", ["k", None]), (0, "ok", "get", ["k", "base"]),
                  (0, "invoke", "append", ["k", "+"]), (0, "ok", "append", ["k", "+"]),
                  (0, "invoke", "get", ["k", None]), (0, "ok", "get", ["k", "base+"]))
    assert check(pair_events(rows), make_model("kv"))["valid"] is False  # "" initially
    assert check(pair_events(rows), make_model("kv", initial="base"))["valid"] is True


# A read that returned nil after a write completed: a stale read of the initial value under
# our convention; under Knossos's, a read whose value is unknown.
NIL_AFTER_WRITE = events((0, "invoke", "write", 1), (0, "ok", "write", 1),
                         (1, "invoke", "read", None), (1, "ok", "read", None))


@pytest.mark.parametrize("nil_reads, valid", [("value", False), ("unknown", True)])
def test_nil_read_conventions(nil_reads, valid):
    for model in (make_model("register", nil_reads=nil_reads),
                  make_model("cas-register", nil_reads=nil_reads)):
        assert check(pair_events(NIL_AFTER_WRITE), model)["valid"] is valid
    keyed = [dict(e, value=["k", e["value"]]) for e in NIL_AFTER_WRITE]
    assert check(pair_events(keyed), make_model("kv", nil_reads=nil_reads))["valid"] is valid


def test_nil_reads_option_is_validated():
    with pytest.raises(ValueError, match="nil reads are value or unknown"):
        Register(nil_reads="ignore")


# -- the search with the append model agrees with brute force ---------------------------

@st.composite
def append_histories(draw) -> list[dict]:
    out, pending, process = [], {}, [0, 1, 2]
    for _ in range(draw(st.integers(0, 12))):
        slot = draw(st.integers(0, 2))
        p = process[slot]
        if p not in pending:
            f = draw(st.sampled_from(["get", "put", "append", "append"]))
            v = None if f == "get" else draw(st.sampled_from(["a", "b"]))
            pending[p] = (f, v)
            out.append({"process": p, "type": "invoke", "f": f, "value": v})
            continue
        f, v = pending.pop(p)
        kind = draw(st.sampled_from(["ok", "ok", "ok", "info"]))
        if f == "get" and kind == "ok":
            v = draw(st.sampled_from(["", "a", "b", "ab", "ba", "aa", "bab"]))
        out.append({"process": p, "type": kind, "f": f, "value": v})
        if kind == "info":
            process[slot] += 3
    return out


def brute_force(ops, model) -> bool:
    def go(remaining: frozenset, state) -> bool:
        if all(ops[i].ret is None for i in remaining):
            return True
        for i in remaining:
            if any(ops[j].ret is not None and ops[j].ret < ops[i].call for j in remaining):
                continue
            ok, new = model.step(state, (ops[i].f, ops[i].value), ops[i].output)
            if ok and go(remaining - {i}, new):
                return True
        return False

    return go(frozenset(range(len(ops))), model.init())


@settings(max_examples=300, deadline=None)
@given(append_histories())
def test_append_search_agrees_with_brute_force(rows):
    model = AppendRegister()
    ops = model.prepare(pair_events(rows))
    assert search(ops, model).valid is brute_force(ops, model)


# -- Porcupine's corpus (when a mirror is present) ----------------------------------------

def _porcupine_kv(tmp_path: Path) -> Path:
    if (MIRROR / "test_data" / "kv").is_dir():
        return MIRROR / "test_data" / "kv"
    if not (MIRROR / "HEAD").is_file():
        pytest.skip(f"no Porcupine mirror at {MIRROR} (set PORCUPINE_DIR to a checkout, or "
                    f"fetch github:anishathalye/porcupine): its kv corpus is not committed here")
    archive = subprocess.run(["git", f"--git-dir={MIRROR}", "archive", "HEAD", "test_data/kv"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive, check=True)
    return tmp_path / "test_data" / "kv"


@pytest.mark.parametrize("name", ["c01-ok", "c01-bad", "c10-ok", "c10-bad", "c50-ok", "c50-bad"])
def test_porcupine_kv_corpus_verdicts(tmp_path, name):
    verdict = check_file(_porcupine_kv(tmp_path) / f"{name}.txt", "kv", budget_s=120)
    assert verdict["valid"] is name.endswith("-ok")


# -- the command line, from a directory outside the repository ---------------------------

def _outside_env() -> dict[str, str]:
    """PATH without the venv: only its interpreter (through the harness script) knows it."""
    venv_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and p != venv_bin)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON", "HARNESS_SPARK_MASTER")}
    return {**env, "PATH": path}


def _harness_check(cwd: Path, *args: str) -> tuple[int, dict, str]:
    history = cwd / "two-keys.edn"
    history.write_text((DATA / "two-keys.edn").read_text())
    proc = subprocess.run([str(HARNESS), "check", history.name, "--model", "kv", *args],
                          cwd=cwd, env=_outside_env(), capture_output=True, text=True,
                          timeout=300)
    lines = proc.stdout.strip().splitlines()
    return proc.returncode, json.loads(lines[-1]) if lines else {}, proc.stderr


def test_two_key_kv_outside_the_repository_in_process(tmp_path):
    assert not tmp_path.resolve().is_relative_to(REPO)
    rc, out, err = _harness_check(tmp_path)
    assert (rc, out["valid"], out["engine"]) == (0, True, "in-process"), err


@pytest.mark.spark
def test_two_key_kv_outside_the_repository_on_spark(tmp_path):
    rc, out, err = _harness_check(tmp_path, "--spark-master", "local[2]", "--spark-min-ops", "0")
    assert (rc, out["valid"], out["engine"]) == (0, True, "spark"), err


def test_an_exception_inside_the_checker_exits_3(tmp_path, monkeypatch, capsys):
    from harness.cli import main

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    # the module, not the function checkers.linear exports under the same name
    monkeypatch.setattr(importlib.import_module("checkers.linear.check"), "check", broken)
    history = tmp_path / "h.edn"
    history.write_text((DATA / "two-keys.edn").read_text())
    assert main(["check", str(history), "--model", "kv"]) == 3
    assert "internal error: RuntimeError: boom" in capsys.readouterr().err


@pytest.mark.spark
def test_a_failed_spark_job_is_one_line_and_exits_3(tmp_path, monkeypatch, capsys):
    """A search that raises on a worker fails the job: the runner says why in one line
    (SparkJobError), and the command exits 3, never with a verdict's code."""
    from checkers.exitcodes import guarded
    from checkers.linear.history import Operation
    from checkers.linear.models import Partition
    from checkers.linear.parallel import SparkJobError, spark_runner
    from checkers.linear.search import Budget

    bad = Operation(0, 0, "cas", 5, None, 0, 1, 0, 1)  # not [expected, new]: step raises
    parts = [Partition(k, [bad], CASRegister()) for k in ("a", "b")]
    run = spark_runner("local[2]", 0)
    with pytest.raises(SparkJobError, match="TypeError") as failed:
        run(parts, Budget())
    assert "\n" not in str(failed.value)
    assert guarded("test", lambda: run(parts, Budget())) == 3
    assert "SparkJobError" in capsys.readouterr().err
