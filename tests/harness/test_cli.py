"""harness.cli and harness.commands: argument parsing, dispatch, the exit-code contract
(0 valid, 1 invalid, 2 unknown, 3 error, 130 interrupted)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness import cli
from harness.commands import argtypes
from harness.commands import serve as serve_cmd

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("1.5h", 5400),
    ("2.5", 2.5), (" 1d ", 86400), ("10M", 600),
])
def test_parse_duration(text, seconds):
    assert argtypes.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "2x", "-5m", "0", "0s", "2h 30m", "m30", "1e3"])
def test_parse_duration_rejects(text):
    with pytest.raises(argparse.ArgumentTypeError, match="bad duration"):
        argtypes.parse_duration(text)


def test_parser_covers_the_documented_command_lines():
    p = cli.build_parser()
    a = p.parse_args(["run", "--config", "t.toml", "--nodes", "5", "--nemesis", "kill,pause",
                      "--time-limit", "60", "--seed", "3", "--set", "a.b=1", "--set", "c=2"])
    assert (a.command, a.config, a.nodes, a.nemesis, a.time_limit, a.seed) == (
        "run", "t.toml", 5, "kill,pause", 60, 3)
    assert a.set == ["a.b=1", "c=2"] and not a.cleanup_only
    assert p.parse_args(["run", "--cleanup-only"]).cleanup_only
    assert p.parse_args(["check", "r/x"]).path == Path("r/x")
    assert p.parse_args(["report", "r/x"]).path == Path("r/x")
    a = p.parse_args(["campaign", "c.toml", "--resume", "--time-budget", "2h"])
    assert (a.file, a.resume, a.time_budget) == (Path("c.toml"), True, 7200)
    assert p.parse_args(["campaign", "c.toml"]).time_budget is None
    assert p.parse_args(["reproduce", "results/latest"]).run_dir == Path("results/latest")
    assert p.parse_args(["serve"]).port == serve_cmd.DEFAULT_PORT
    assert p.parse_args(["serve", "--port", "9000"]).port == 9000


@pytest.mark.parametrize("argv", [[], ["fly"], ["run", "--nodes", "five"],
                                  ["campaign", "c.toml", "--time-budget", "soon"],
                                  ["serve", "--port", "70000"], ["check"]])
def test_usage_errors_exit_3_never_a_verdict(argv, capsys):
    assert cli.main(argv) == 3
    assert "usage: harness" in capsys.readouterr().err


def test_run_resolves_the_config_before_the_runner(monkeypatch, tmp_path, capsys):
    seen = []

    def run_test(test):
        seen.append(test)
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        (run_dir / "results.json").write_text('{"valid": false}')
        return run_dir
    monkeypatch.setattr("harness.runner.run_test", run_test)
    assert cli.main(["run", "--config", "fast", "--seed", "9", "--set", "topic.partitions=1"]) == 1
    test = seen[0]
    assert test.config.seed == 9 and test.config.name == "fast"
    assert test.config.topic.partitions == 1 and test.plan.source == "seeded"
    assert capsys.readouterr().out.strip() == str(tmp_path / "run" / "report.html")


def test_a_run_that_was_never_checked_exits_3(monkeypatch, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    monkeypatch.setattr("harness.runner.run_test", lambda test: run_dir)
    assert cli.main(["run", "--config", "fast"]) == 3


def test_run_with_bad_config_fails_before_the_runner(monkeypatch, tmp_path, capsys):
    called = []
    monkeypatch.setattr("harness.runner.run_test", called.append)
    bad = tmp_path / "t.toml"
    bad.write_text("[workload]\nacks = 2\n")
    assert cli.main(["run", "--config", str(bad)]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{bad} line 2" in err and "workload.acks" in err
    assert called == []
    assert cli.main(["run", "--set", "system.acks=1"]) == 3
    assert "did you mean 'workload.acks'" in capsys.readouterr().err


def test_dispatch_arguments_and_exit_codes(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("HARNESS_RESULTS", raising=False)
    calls = []
    night = tmp_path / "night"
    night.mkdir()
    (night / "campaign.json").write_text('{"verdict": "regression"}')
    monkeypatch.setattr("harness.campaign.run_campaign",
                        lambda *a, **kw: calls.append((*a, kw)) or night)
    # after harness.campaign is imported (above), which binds the real one for itself
    spec = ("c", [])  # what the command read, handed to run_campaign
    monkeypatch.setattr("harness.campaign_spec.load_spec", lambda *a: spec)
    monkeypatch.setattr("harness.reproduce.reproduce", lambda d: calls.append(d) or 0)
    monkeypatch.setattr("harness.serve.serve", lambda d, p: calls.append((d, p)))
    monkeypatch.setattr("harness.report.report_path", lambda p: p / "report.html")
    monkeypatch.setattr("checkers.check.check_path", lambda p, **kw: {"valid": False, "anomalies": {
        "lost-write": {"count": 2, "examples": []}}})
    assert cli.main(["campaign", "c.toml", "--resume", "--time-budget", "30m"]) == 1
    (night / "campaign.json").write_text('{"verdict": "pass"}')
    assert cli.main(["campaign", "c.toml", "--seeds", "1-10", "--config", "safe"]) == 0
    calls.pop()
    # a night none of whose cells could run is no pass, nor is one with an unknown verdict
    (night / "campaign.json").write_text(
        '{"verdict": "errors", "cells": [{"outcome": "error"}, {"outcome": "unknown"}]}')
    assert cli.main(["campaign", "c.toml", "--seeds", "1-10", "--config", "safe"]) == 3
    calls.pop()
    (night / "campaign.json").write_text('{"verdict": "errors", "cells": [{"outcome": "ok"}, '
                                         '{"outcome": "unknown"}]}')
    assert cli.main(["campaign", "c.toml", "--seeds", "1-10", "--config", "safe"]) == 2
    calls.pop()
    (night / "campaign.json").write_text('{"verdict": "pass", "cells": [{"outcome": "ok"}]}')
    assert cli.main(["campaign", "c.toml", "--seeds", "1-10", "--config", "safe"]) == 0
    assert calls.pop() == (Path("c.toml"), False, None,
                           {"seeds": "1-10", "only": ["safe"], "systems": None, "spec": spec})
    assert cli.main(["campaign", "c.toml", "--systems", "sim,kafka:3.9.1"]) == 0
    assert [s.label for s in calls.pop()[3]["systems"]] == ["sim", "kafka:3.9.1"]
    assert cli.main(["campaign", "c.toml", "--systems", "sim,sim"]) == 3
    assert cli.main(["reproduce", "r"]) == 0
    assert cli.main(["serve", "--port", "8123"]) == 0
    assert calls == [(Path("c.toml"), True, 1800,
                      {"seeds": None, "only": None, "systems": None, "spec": spec}),
                     Path("r"),
                     (Path("results"), 8123)]
    assert cli.main(["report", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "report.html")
    (tmp_path / "history.jsonl").touch()  # the command refuses a folder without one first
    assert cli.main(["check", str(tmp_path)]) == 1
    assert '"lost-write": 2' in capsys.readouterr().out


@pytest.mark.parametrize(("valid", "code"), [(True, 0), (False, 1), ("unknown", 2), (None, 2)])
def test_check_exit_codes_are_the_verdict(monkeypatch, tmp_path, valid, code):
    monkeypatch.setattr("checkers.check.check_path", lambda p, **kw: {"valid": valid, "anomalies": {}})
    (tmp_path / "history.jsonl").touch()
    assert cli.main(["check", str(tmp_path)]) == code


def test_user_errors_are_one_line_and_exit_3(monkeypatch, capsys):
    def report_path(path):
        raise ValueError(f"{path}: neither a run folder nor a campaign folder")
    monkeypatch.setattr("harness.report.report_path", report_path)
    assert cli.main(["report", "nowhere"]) == 3
    assert capsys.readouterr().err == \
        "harness: error: nowhere: neither a run folder nor a campaign folder\n"


def test_a_kafka_that_does_not_answer_is_one_line_and_exit_3(monkeypatch, capsys):
    # Seen on VMs under software emulation: the topic's creation timed out, and the run ended
    # in a traceback labelled an internal error.
    from workloads.kafka_admin import KafkaAdminError

    def report_path(path):
        raise KafkaAdminError("creating topic 'chaos': Local: Timed out, still after 120 s")
    monkeypatch.setattr("harness.report.report_path", report_path)
    assert cli.main(["report", "nowhere"]) == 3
    assert capsys.readouterr().err == \
        "harness: error: creating topic 'chaos': Local: Timed out, still after 120 s\n"


def test_a_crash_inside_the_checker_exits_3_with_a_short_traceback(monkeypatch, tmp_path, capsys):
    def check_path(path, **kw):
        return {}["valid"]  # a bug: KeyError
    monkeypatch.setattr("checkers.check.check_path", check_path)
    (tmp_path / "history.jsonl").touch()
    assert cli.main(["check", str(tmp_path)]) == 3
    err = capsys.readouterr().err
    assert err.startswith("harness: internal error: KeyError") and "check_path" in err


def test_harness_check_on_a_crash_inducing_history_exits_3(tmp_path, capsys):
    # A value no Parquet column can hold: before, an OverflowError escaped and exited 1.
    history = tmp_path / "history.jsonl"
    history.write_text(json.dumps({"index": 0, "time": 0, "process": 0, "type": "invoke",
                                   "f": "send", "partition": 0, "value": 2**70}) + "\n")
    code = cli.main(["check", str(history), "--spark-master", "local[1]"])
    assert code == 3, capsys.readouterr()


def test_keyboard_interrupt_exits_130(monkeypatch, capsys):
    def reproduce(run_dir):
        raise KeyboardInterrupt
    monkeypatch.setattr("harness.reproduce.reproduce", reproduce)
    assert cli.main(["reproduce", "r"]) == 130
    assert capsys.readouterr().err == "harness: interrupted\n"


def test_real_sigint_gives_130_and_no_traceback(tmp_path):
    script = textwrap.dedent("""
        import sys, time
        from harness import cli
        import harness.serve
        def serve(results, port):
            print("serving", flush=True)
            time.sleep(60)
        harness.serve.serve = serve
        sys.exit(cli.main(["serve"]))
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == "serving\n"
        time.sleep(0.1)
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert err == "harness: interrupted\n"


def test_console_script_is_installed_and_answers():
    script = Path(sys.executable).parent / "harness"
    if not script.exists():
        pytest.skip("console script not installed in this environment (pip install -e .)")
    done = subprocess.run([str(script), "run", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0
    for flag in ("--config", "--nodes", "--nemesis", "--time-limit", "--seed", "--set",
                 "--cleanup-only"):
        assert flag in done.stdout


# A second or two of every `harness` start, and what most commands' refusals never need.
HEAVY = ("matplotlib", "pandas", "pyspark", "pyarrow", "numpy", "paramiko", "confluent_kafka",
         "jinja2", "duckdb")
BAD_MINIMAL = '{"format": 1, "config": {}, "schedule": "not a list"}'


def _heavy_after(tmp_path: Path, argv: list[str]) -> tuple[int, list[str]]:
    """Run `harness ARGV` in a fresh interpreter: its exit code and the heavy libraries it
    had imported by then."""
    probe = ("import sys; from harness import cli; code = cli.main(sys.argv[1:]); "
             f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r})); "
             "sys.exit(code)")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_RESULTS": str(tmp_path / "results")}
    done = subprocess.run([sys.executable, "-c", probe, *argv], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout.strip().splitlines()[-1:]


@pytest.mark.parametrize(("argv", "code"), [
    (["--help"], 0), (["run", "--help"], 0), (["check", "--help"], 0),
    (["run", "--config", "nosuch"], 3), (["simulate", "--seeds", "0-99999999999999999999"], 3),
    (["simulate", "--replay", "minimal.json"], 3), (["reproduce", "--schedule", "minimal.json"], 3),
    (["check", "missing.edn"], 3), (["check", "missing.jsonl", "--model", "register"], 3),
    (["check", "missing.jsonl"], 3), (["check", "."], 3),
    (["campaign", "c.toml", "--seeds", "0-99999999999999999999"], 3),
    (["campaign", "missing.toml"], 3), (["campaign", "minimal.json"], 3),
], ids=lambda v: " ".join(v) if isinstance(v, list) else str(v))
def test_help_and_refused_input_start_without_the_heavy_libraries(tmp_path, argv, code):
    """harness/commands/__init__.py: a command imports its engine once its input is accepted,
    so `--help`, a usage error or a bad file is answered without pandas, Spark or paramiko."""
    (tmp_path / "minimal.json").write_text(BAD_MINIMAL)
    assert _heavy_after(tmp_path, argv) == (code, ["[]"])


def test_a_command_that_runs_imports_its_engine(tmp_path):
    """The must-fail twin of the probe above: it sees the libraries a real check imports."""
    history = tmp_path / "history.jsonl"
    history.write_text(json.dumps({"index": 0, "time": 0, "process": 0, "type": "invoke",
                                   "f": "send", "partition": 0, "value": 1}) + "\n")
    code, heavy = _heavy_after(tmp_path, ["check", str(history), "--in-process"])
    assert "pandas" in heavy[0] and "pyarrow" in heavy[0], (code, heavy)
