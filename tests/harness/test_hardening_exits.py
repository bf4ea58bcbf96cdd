"""Hardening, round two (issue 35): malformed input reaches a one-line error and exit 3 --
never a traceback ("internal error"), never exit 1 (which reads as "invalid"), never a hang.
Each case runs the real `harness` command: a huge seed range, EDN nested past any history,
Jepsen ops with bad micro-ops, a malformed minimal.json, and a FIFO where a file is read."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harness import campaign_spec
from harness.config import load_config

ROOT = Path(__file__).resolve().parents[2]


def harness(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_RESULTS": str(tmp_path / "results")}
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def one_line_exit_3(done: subprocess.CompletedProcess, says: str = "") -> None:
    assert done.returncode == 3, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, done.stderr[-2000:]
    assert says in errors[0]


# -- seed ranges: lazy, with a cap ----------------------------------------------------------

HUGE = ["0-99999999999999999999", "0-9223372036854775808", "5-10000000000"]


@pytest.mark.parametrize("seeds", HUGE)
def test_a_huge_seed_range_of_simulate_is_one_line_exit_3(tmp_path, seeds):
    one_line_exit_3(harness(tmp_path, "simulate", "--config", "fast", "--seeds", seeds),
                    "--seeds")


@pytest.mark.parametrize("seeds", HUGE)
def test_a_huge_seed_range_of_a_campaign_is_one_line_exit_3(tmp_path, seeds):
    done = harness(tmp_path, "campaign", str(ROOT / "campaigns" / "quick.toml"), "--seeds", seeds)
    one_line_exit_3(done, "seeds")


def test_seed_ranges_are_lazy_and_capped():
    seeds = campaign_spec.seed_range(f"7-{7 + campaign_spec.MAX_SEEDS - 1}")
    assert isinstance(seeds, range) and len(seeds) == campaign_spec.MAX_SEEDS and seeds[0] == 7
    with pytest.raises(ValueError, match="more than 1,000,000"):
        campaign_spec.seed_range(f"7-{7 + campaign_spec.MAX_SEEDS}")


def test_a_campaign_of_too_many_cells_is_refused_before_any_is_built(monkeypatch):
    monkeypatch.setattr(campaign_spec, "MAX_CELLS", 5)
    with pytest.raises(campaign_spec.CampaignError, match="more than 5 cells"):
        campaign_spec.load_spec(ROOT / "campaigns" / "quick.toml", seeds="1-100")


def test_the_cell_cap_counts_every_config_before_building_a_cell(monkeypatch):
    """quick.toml has two configs of one mix each: with as many seeds as the cap, the first
    alone fits and the second goes over. Before, the first config's cells were all built (each
    a config's validation: 100,000 seeds took minutes) before the second was counted."""
    built = []
    monkeypatch.setattr(campaign_spec, "MAX_CELLS", 3)
    monkeypatch.setattr(campaign_spec, "load_config", lambda *a, **kw: built.append(a))
    with pytest.raises(campaign_spec.CampaignError, match="more than 3 cells"):
        campaign_spec.load_spec(ROOT / "campaigns" / "quick.toml", seeds="1-3")
    assert built == []


# -- histories: too deep, bad micro-ops, FIFOs ------------------------------------------------

DEEP = "[" * 100_000 + "]" * 100_000 + "\n"


@pytest.mark.parametrize("model", [None, "register"])
def test_deeply_nested_edn_is_one_line_exit_3(tmp_path, model):
    (tmp_path / "x.edn").write_text(DEEP)
    args = ["check", "x.edn"] + (["--model", model] if model else [])
    one_line_exit_3(harness(tmp_path, *args))


def test_deeply_nested_jsonl_is_one_line_exit_3(tmp_path):
    (tmp_path / "x.jsonl").write_text(DEEP)
    one_line_exit_3(harness(tmp_path, "check", "x.jsonl", "--model", "register"),
                    "nested too deeply")


BAD_MICRO_OPS = [
    ("poll of a number", ":txn", "[[:poll 5]]", "a :poll micro-op is"),
    ("send of nothing", ":txn", "[[:send]]", "a :send micro-op is"),
    ("reads not a vector", ":poll", "[[:poll {3 5}]]", "a :poll micro-op's reads of a key"),
    ("micro-op a number", ":txn", "[5]", "a micro-op must be"),
    ("value a keyword", ":send", ":x", ":send needs a vector value"),
    ("time a keyword", ":send", "[[:send 0 1]], :time :soon", ":time and :index"),
    ("rebalance-log of numbers", ":poll", "[[:poll {0 [[0 1]]}]], :rebalance-log [1]",
     ":rebalance-log"),
]


@pytest.mark.parametrize(("case", "f", "value", "says"), BAD_MICRO_OPS,
                         ids=[c[0] for c in BAD_MICRO_OPS])
def test_bad_jepsen_micro_ops_are_one_line_exit_3(tmp_path, case, f, value, says):
    (tmp_path / "h.edn").write_text(
        "{:type :invoke, :f :send, :value [[:send 0 1]], :process 0, :index 0}\n"
        f"{{:type :ok, :f {f}, :value {value}, :process 0, :index 1}}\n")
    one_line_exit_3(harness(tmp_path, "check", "h.edn"), f"h.edn:2: {says}")


@pytest.mark.parametrize("args", [["f.jsonl"], ["f.edn"], ["f.txt"], ["run"],
                                  ["f.jsonl", "--model", "register"],
                                  ["f.edn", "--model", "kv"], ["f.txt", "--model", "register"]],
                         ids=" ".join)
def test_a_fifo_history_is_refused_not_read(tmp_path, args):
    (tmp_path / "run").mkdir()
    for name in ("f.jsonl", "f.edn", "f.txt", "run/history.jsonl"):
        os.mkfifo(tmp_path / name)
    one_line_exit_3(harness(tmp_path, "check", *args), "is a FIFO, not a regular file")


# -- minimal.json: `harness simulate --replay` and `harness reproduce --schedule` --------------


def _minimal(**changes) -> dict:
    doc = {"format": 1, "config": load_config("fast", overrides={"time_limit": 5}),
           "anomaly": "lost-write", "schedule": []}
    return {**doc, **changes}


KILL = {"id": 0, "kind": "kill", "start_s": 1, "duration_s": 1,
        "target": {"select": "leader", "partition": 0, "pick": 1}}
BAD_MINIMAL = [
    ("truncated", '{"format": 1, "conf', "cannot read"),
    ("nested 100000 deep", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("a list", [], "not a minimal.json"),
    ("config a list", _minimal(config=[]), "not a minimal.json"),
    ("schedule a string", _minimal(schedule="x"), "schedule must be a list"),
    ("entry a number", _minimal(schedule=[5]), "schedule[0]: expected an object"),
    ("entry without kind", _minimal(schedule=[{"id": 0}]), "schedule[0]: missing kind"),
    ("unknown kind", _minimal(schedule=[{**KILL, "kind": "zap"}]), "unknown kind 'zap'"),
    ("start a string", _minimal(schedule=[{**KILL, "start_s": "x"}]), "start_s and duration_s"),
    ("id a float", _minimal(schedule=[{**KILL, "id": 0.5}]), "id and after must be integers"),
    ("target a number", _minimal(schedule=[{**KILL, "target": 7}]), "target must be an object"),
]


@pytest.mark.parametrize("command", [["simulate", "--replay"], ["reproduce", "--schedule"]],
                         ids=lambda c: c[0])
@pytest.mark.parametrize(("case", "doc", "says"), BAD_MINIMAL, ids=[c[0] for c in BAD_MINIMAL])
def test_a_malformed_minimal_json_is_one_line_exit_3(tmp_path, command, case, doc, says):
    path = tmp_path / "minimal.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    one_line_exit_3(harness(tmp_path, *command, str(path)), says)


@pytest.mark.parametrize("command", [["simulate", "--replay"], ["reproduce", "--schedule"]],
                         ids=lambda c: c[0])
def test_a_fifo_minimal_json_is_refused_not_read(tmp_path, command):
    os.mkfifo(tmp_path / "minimal.json")
    one_line_exit_3(harness(tmp_path, *command, str(tmp_path / "minimal.json")),
                    "is a FIFO, not a regular file")


def test_an_unreachable_ssh_host_is_one_line_and_exit_3(tmp_path):
    """A run on inventory hosts nobody listens for: the environment's fault, said in one line
    naming the host (it was an internal error with a traceback)."""
    import socket

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    key = tmp_path / "id"
    pem = ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption())
    key.write_bytes(pem)
    key.chmod(0o600)
    (tmp_path / "known_hosts").write_text("")
    hosts = "".join(f'[[hosts]]\nname = "n{i}"\naddress = "127.0.0.1"\nport = {port}\n'
                    for i in (1, 2))
    inventory = tmp_path / "inventory.toml"
    inventory.write_text(f'[defaults]\nkey_file = "{key}"\nknown_hosts = '
                         f'"{tmp_path / "known_hosts"}"\nuser = "root"\n'
                         f'work_dir = "/var/lib/kch-test"\npython = "python3"\n' + hosts)
    out = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--nodes", "2",
                          "--set", "hosts.provider=ssh", "--set", f"hosts.inventory={inventory}",
                          "--set", "topic.replication_factor=1",
                          "--set", "system.min.insync.replicas=1", "--time-limit", "5"],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "HARNESS_RESULTS": str(tmp_path / "results")})
    assert out.returncode == 3, out.stderr
    assert "unreachable" in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert "internal error" not in out.stderr, out.stderr


# -- Spark that cannot start --------------------------------------------------------------

SMALL_HISTORY = [
    {"index": 0, "time": 10, "process": 0, "type": "invoke", "f": "send", "partition": 0,
     "value": 5},
    {"index": 1, "time": 20, "process": 0, "type": "ok", "f": "send", "partition": 0,
     "value": 5, "offset": 0, "node": 1, "epoch": 1},
    {"index": 2, "time": 30, "process": 1, "type": "invoke", "f": "final-poll", "partition": 0,
     "offset": 0},
    {"index": 3, "time": 40, "process": 1, "type": "ok", "f": "final-poll", "partition": 0,
     "offset": 0, "records": [[0, 5]], "hwm": 1},
]  # fmt: skip


def _run_folder(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "history.jsonl").write_text("".join(json.dumps(op) + "\n" for op in SMALL_HISTORY))
    return run


def check_on_spark(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """`harness check` of a good history on Spark, as a real process with `env` added."""
    environment = {k: v for k, v in os.environ.items() if k != "HARNESS_SPARK_MASTER"}
    environment.update(PYTHONPATH=str(ROOT), **env)
    return subprocess.run([sys.executable, "-m", "harness.cli", "check", str(_run_folder(tmp_path)),
                           *args], cwd=tmp_path, env=environment, capture_output=True,
                          text=True, timeout=300, check=False)


def only_the_error(done: subprocess.CompletedProcess, says: str) -> None:
    """Exit 3 and, besides the checker's progress lines, one line on stderr: the cause."""
    one_line_exit_3(done, says)
    rest = [line for line in done.stderr.splitlines() if not line.startswith("[checker] ")]
    assert len(rest) == 1 and rest[0].startswith("harness: error: "), done.stderr[-2000:]


def test_a_spark_master_nobody_listens_at_is_one_line_exit_3(tmp_path):
    with socket.socket() as s:  # a port of ours that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = check_on_spark(tmp_path, "--spark-master", f"spark://127.0.0.1:{port}")
    only_the_error(done, f"the Spark master spark://127.0.0.1:{port} cannot be reached "
                         f"(127.0.0.1:{port}: Connection refused)")


def test_a_java_home_pointing_nowhere_is_one_line_exit_3(tmp_path):
    done = check_on_spark(tmp_path, JAVA_HOME=str(tmp_path / "no-jdk"))
    only_the_error(done, f"Spark needs Java: JAVA_HOME is {tmp_path / 'no-jdk'}: ")


def test_a_broken_java_is_one_line_exit_3(tmp_path):
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\necho 'Error: could not open lib/jvm.cfg' >&2\nexit 1\n")
    java.chmod(0o755)
    done = check_on_spark(tmp_path, JAVA_HOME=str(tmp_path / "jdk"))
    only_the_error(done, "`-version` failed: Error: could not open lib/jvm.cfg".replace(
        "`-version", f"`{java} -version"))


@pytest.mark.parametrize("master", ["nosuch://127.0.0.1:1", "local[abc]", "spark://:7077"])
def test_a_master_url_spark_does_not_take_is_one_line_exit_3(tmp_path, master):
    """spark-submit would refuse these with a Java stack trace from its own process (or, for
    local[abc], fail later on something else): they are refused before Spark starts."""
    only_the_error(check_on_spark(tmp_path, "--spark-master", master),
                   f"bad Spark master URL {master!r}")


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="a hostname of its own (unshare --uts) needs root")
def test_local_spark_starts_where_the_machine_name_does_not_resolve(tmp_path):
    """A container or chroot whose /etc/hosts lacks the machine's name (a debootstrap'ed
    Debian 12 chroot did): local Spark's launcher looked that name up and died before the
    session. Its driver is on loopback, and now its launcher is told so."""
    script = ("hostname h35-no-such-host.invalid && exec " + " ".join(
        [sys.executable, "-m", "harness.cli", "check", str(_run_folder(tmp_path)),
         "--spark-master", "'local[1]'"]))
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("HARNESS_SPARK_MASTER", "SPARK_LOCAL_IP")}
    done = subprocess.run(["unshare", "--uts", "sh", "-c", script], cwd=tmp_path,
                          env={**environment, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1])["valid"] is True
