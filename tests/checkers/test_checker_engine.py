"""Which engine checks a history, and the Spark session kept for a process's checks."""

from __future__ import annotations

import json

import pytest
from support.tools import skip_reason
from test_checker_anomalies import loss

from checkers import spark as spark_mod
from checkers.check import SPARK_MIN_OPS, _engine, check_path
from checkers.exitcodes import UserError


def _results(run) -> dict:
    return json.loads((run / "results.json").read_text())


@pytest.mark.spark
def test_small_histories_are_checked_in_process_with_the_same_results(spark, tmp_path, capsys):
    run = loss().write(tmp_path / "run")
    check_path(run)  # the default: every history on Spark
    on_spark, err = _results(run), capsys.readouterr().err
    assert "on Spark local[2]" in err and "ingest of" in err
    assert ("(native)" in err) == (skip_reason("native") is None)  # the native reader, if built
    check_path(run, spark_min_ops=1000)  # opted in: a history this small, in this process
    in_process, err = _results(run), capsys.readouterr().err
    assert "in this process" in err and "Spark" not in err
    assert on_spark["anomalies"] == in_process["anomalies"] and on_spark["valid"] is False
    assert on_spark["lost"]["count"] == in_process["lost"]["count"] == 2


def test_only_a_small_history_on_a_local_master_is_checked_in_process():
    assert SPARK_MIN_OPS == 0 and _engine("spark", 1, SPARK_MIN_OPS, "local[2]") == "spark"
    assert _engine("spark", 199_999, 200_000, "local[2]") == "in-process"
    assert _engine("spark", 200_000, 200_000, "local[*]") == "spark"
    # a cluster was set up for the work (test_checker_cluster runs a small history there)
    assert _engine("spark", 10, 200_000, "spark://10.0.0.5:7077") == "spark"
    assert _engine("reference", 10**9, SPARK_MIN_OPS, "local[2]") == "in-process"


def test_a_run_opts_in_through_its_checker_settings(tmp_path, capsys):
    run = loss().write(tmp_path / "run", config={"checker": {"spark_min_ops": 200_000}})
    check_path(run)
    assert "in this process" in capsys.readouterr().err
    bad = loss().write(tmp_path / "bad", config={"checker": {"spark_min_ops": "many"}})
    with pytest.raises(UserError, match="spark_min_ops must be an integer >= 0"):
        check_path(bad)


@pytest.mark.spark
def test_the_session_is_kept_for_every_check_of_the_process(spark, tmp_path, capsys):
    first = spark_mod.get_session()
    for i in range(2):
        check_path(loss().write(tmp_path / f"run{i}"), spark_min_ops=0)
    assert spark_mod.get_session() is first
    assert "Spark session" not in capsys.readouterr().err  # no second start
