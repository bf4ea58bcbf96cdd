"""`harness check --model`: linearizability of histories of other objects, from Jepsen EDN."""

from __future__ import annotations

import json

from harness.cli import main

WRITE_THEN_READ = """\
{:type :invoke, :f :write, :value 1, :process 0, :time 1, :index 0}
{:type :ok, :f :write, :value 1, :process 0, :time 2, :index 1}
{:type :invoke, :f :read, :value nil, :process 1, :time 3, :index 2}
{:type :ok, :f :read, :value %s, :process 1, :time 4, :index 3}
"""


def test_valid_history_exits_0(tmp_path, capsys):
    path = tmp_path / "h.edn"
    path.write_text(WRITE_THEN_READ % 1)
    assert main(["check", str(path), "--model", "register"]) == 0
    verdict = json.loads((tmp_path / "h.linearizability.json").read_text())
    assert verdict["valid"] is True


def test_stale_read_exits_1_with_the_failing_op(tmp_path, capsys):
    path = tmp_path / "h.edn"
    path.write_text(WRITE_THEN_READ % "nil")
    assert main(["check", str(path), "--model", "register"]) == 1
    verdict = json.loads((tmp_path / "h.linearizability.json").read_text())
    assert verdict["valid"] is False and verdict["failure"]


def test_edn_without_model_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "h.edn"
    path.write_text(WRITE_THEN_READ % 1)
    assert main(["check", str(path)]) == 3
    assert "--model" in capsys.readouterr().err
