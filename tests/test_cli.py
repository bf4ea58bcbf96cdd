"""harness.cli: argument parsing, dispatch, error and interrupt handling."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest

from harness import cli

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("1.5h", 5400),
    ("2.5", 2.5), (" 1d ", 86400), ("10M", 600),
])
def test_parse_duration(text, seconds):
    assert cli.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "2x", "-5m", "0", "0s", "2h 30m", "m30", "1e3"])
def test_parse_duration_rejects(text):
    with pytest.raises(argparse.ArgumentTypeError, match="bad duration"):
        cli.parse_duration(text)


def test_parser_covers_the_design_command_lines():
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
    assert p.parse_args(["serve"]).port == cli.DEFAULT_PORT
    assert p.parse_args(["serve", "--port", "9000"]).port == 9000


@pytest.mark.parametrize("argv", [[], ["fly"], ["run", "--nodes", "five"],
                                  ["campaign", "c.toml", "--time-budget", "soon"],
                                  ["serve", "--port", "70000"], ["check"]])
def test_usage_errors_exit_2(argv, capsys):
    assert cli.main(argv) == 2
    assert "usage: harness" in capsys.readouterr().err


@pytest.fixture
def fake_module(monkeypatch):
    """Install a stand-in implementation module (the dispatch under test is pure logic)."""
    def install(name: str, **attrs):
        module = types.ModuleType(name)
        for key, value in attrs.items():
            setattr(module, key, value)
        monkeypatch.setitem(sys.modules, name, module)
        return module
    return install


def test_run_resolves_the_config_before_dispatching(fake_module, tmp_path):
    seen = {}

    def run_from_cli(args):
        seen["args"] = args
        return 1
    fake_module("harness.runner", run_from_cli=run_from_cli)
    assert cli.main(["run", "--config", "fast", "--seed", "9", "--set", "topic.partitions=1"]) == 1
    args = seen["args"]
    assert args.resolved_config["seed"] == 9 and args.resolved_config["name"] == "fast"
    assert args.resolved_config["topic"]["partitions"] == 1
    assert args.argv == ["harness", "run", "--config", "fast", "--seed", "9", "--set",
                         "topic.partitions=1"]
    assert cli.main(["run", "--cleanup-only"]) == 1
    assert seen["args"].resolved_config is None


def test_run_with_bad_config_fails_before_the_runner(fake_module, tmp_path, capsys):
    called = []
    fake_module("harness.runner", run_from_cli=called.append)
    bad = tmp_path / "t.toml"
    bad.write_text("[workload]\nacks = 2\n")
    assert cli.main(["run", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{bad} line 2" in err and "workload.acks" in err
    assert called == []
    assert cli.main(["run", "--set", "system.acks=1"]) == 2
    assert "did you mean 'workload.acks'" in capsys.readouterr().err


def test_missing_implementation_is_not_available_yet(fake_module, capsys):
    fake_module("harness.serve")  # present but without serve()
    assert cli.main(["serve"]) == 2
    assert "`harness serve` is not available yet (harness.serve.serve is missing)" in \
        capsys.readouterr().err
    with pytest.raises(cli.NotAvailable, match="not in this checkout"):
        cli._implementation("harness.no_such_piece", "f", "x")


def test_a_missing_dependency_is_not_hidden(tmp_path, monkeypatch):
    (tmp_path / "broken_piece.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="no_such_dependency_xyz"):
        cli._implementation("broken_piece", "f", "x")


def test_a_missing_project_module_inside_an_implementation_is_not_available(
        tmp_path, monkeypatch):
    (tmp_path / "half_done.py").write_text("import harness.piece_not_written_yet\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(cli.NotAvailable, match="harness.piece_not_written_yet is not in"):
        cli._implementation("half_done", "f", "x")


def test_dispatch_arguments_and_exit_codes(fake_module, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HARNESS_RESULTS", raising=False)
    calls = []
    night = tmp_path / "night"
    night.mkdir()
    (night / "campaign.json").write_text('{"verdict": "regression"}')
    fake_module("harness.campaign", run_campaign=lambda *a: calls.append(a) or night)
    fake_module("harness.reproduce", reproduce=lambda d: calls.append(d))
    fake_module("harness.serve", serve=lambda d, p: calls.append((d, p)))
    fake_module("harness.report", report_path=lambda p: p / "report.html")
    fake_module("checkers.check", check_path=lambda p, **kw: {"valid": False, "anomalies": {
        "lost-write": {"count": 2, "examples": []}}},
        exit_code=lambda r: {True: 0, False: 1}.get(r["valid"], 2))
    assert cli.main(["campaign", "c.toml", "--resume", "--time-budget", "30m"]) == 1
    (night / "campaign.json").write_text('{"verdict": "pass"}')
    assert cli.main(["campaign", "c.toml"]) == 0
    calls.pop()
    assert cli.main(["reproduce", "r"]) == 0
    assert cli.main(["serve", "--port", "8123"]) == 0
    assert calls == [(Path("c.toml"), True, 1800), Path("r"), (Path("results"), 8123)]
    assert cli.main(["report", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "report.html")
    assert cli.main(["check", str(tmp_path)]) == 1
    assert '"lost-write": 2' in capsys.readouterr().out


def test_user_errors_from_implementations_are_one_line(fake_module, capsys):
    def report_path(path):
        raise ValueError(f"{path}: neither a run folder nor a campaign folder")
    fake_module("harness.report", report_path=report_path)
    assert cli.main(["report", "nowhere"]) == 2
    assert capsys.readouterr().err == \
        "harness: error: nowhere: neither a run folder nor a campaign folder\n"


def test_keyboard_interrupt_exits_130(fake_module, capsys):
    def reproduce(run_dir):
        raise KeyboardInterrupt
    fake_module("harness.reproduce", reproduce=reproduce)
    assert cli.main(["reproduce", "r"]) == 130
    assert capsys.readouterr().err == "harness: interrupted\n"


def test_real_sigint_gives_130_and_no_traceback(tmp_path):
    script = textwrap.dedent("""
        import sys, time, types
        from harness import cli
        module = types.ModuleType("harness.serve")
        def serve(results, port):
            print("serving", flush=True)
            time.sleep(60)
        module.serve = serve
        sys.modules["harness.serve"] = module
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
