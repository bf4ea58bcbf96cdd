"""Hardening (issue 20) as root: the /tmp attacks re-tried by an unprivileged local user after
the fix (both fail), a full disk under the checker, and two simultaneous `harness run`s with the
same seed (both complete, valid).

The attacker is a real user (created with useradd if missing) acting through `runuser`. The
shared /tmp is played by a fresh root-owned 1777 directory passed as TMPDIR, so the attacks do
not disturb other users of the machine's /tmp."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.users import ATTACKER, as_attacker
from test_hardening import run_folder
from test_report import write_run_folder

from checkers import __main__ as checkers_main
from checkers import check as check_mod
from checkers.check import check_path
from control.files import UnsafePathError
from control.netns_provider import NetnsProvider
from harness import cli, store
from harness.config import load_config, typed
from nemesis.lazyfs import mount as lazymount

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (useradd, runuser, mounts, netns)"),
]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    """A file of root's the attacker would like root to overwrite."""
    c = tmp_path / "canary"
    c.write_text("root's own file\n")
    return c


def root_env(shared_tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LAZYFS_RUN_DIR"}
    return {**env, "TMPDIR": str(shared_tmp), "PYTHONPATH": str(ROOT), **extra}


# -- attack 1: the checker's log4j2 configuration at a fixed name in /tmp --------------------

OLD_LOG4J = "harness-checker-log4j2-0.properties"


def test_a_planted_log4j_symlink_is_not_written_through(attacker, shared_tmp, canary):
    as_attacker("ln", "-s", str(canary), str(shared_tmp / OLD_LOG4J))
    done = subprocess.run(
        [sys.executable, "-c", "from checkers.spark import _log4j_file; print(_log4j_file())"],
        env=root_env(shared_tmp), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    used = Path(done.stdout.strip())
    assert used.parent.parent == shared_tmp and used.name != OLD_LOG4J
    assert canary.read_text() == "root's own file\n"
    assert os.readlink(shared_tmp / OLD_LOG4J) == str(canary)  # left as the attacker made it
    assert sorted(os.listdir(shared_tmp)) == [OLD_LOG4J]  # the private dir went away at exit


@pytest.mark.spark
def test_a_planted_log4j_config_is_not_loaded_by_roots_checker(attacker, shared_tmp, tmp_path):
    """The attacker's configuration would have root's JVM create a file of their choosing."""
    pwned = shared_tmp / "pwned-by-log4j"
    evil = (f"appender.f.type = File\nappender.f.name = f\nappender.f.fileName = {pwned}\n"
            "appender.f.layout.type = PatternLayout\nrootLogger.level = all\n"
            "rootLogger.appenderRef.f.ref = f\n")
    as_attacker("sh", "-c", f"printf '%s' '{evil}' > {shared_tmp / OLD_LOG4J}")
    run = run_folder(tmp_path)
    done = subprocess.run([sys.executable, "-m", "checkers", str(run)], env=root_env(shared_tmp),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr  # valid
    assert not pwned.exists()
    # Nothing of the checker's (log4j file, Spark's scratch, native libraries) is left in /tmp.
    assert sorted(os.listdir(shared_tmp)) == [OLD_LOG4J]


# -- attack 2: /tmp/kch and /tmp/lazyfs-mounts -----------------------------------------------


def _registry_key(mountpoint: Path) -> str:
    return hashlib.sha1(os.path.realpath(mountpoint).encode()).hexdigest()[:16]


def _lazyfs(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nemesis.lazyfs", *args], env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.fuse
def test_a_planted_lazyfs_registry_is_neither_used_nor_written_through(attacker, shared_tmp,
                                                                      tmp_path, canary):
    backing, mnt = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mnt.mkdir()
    sock = str(tmp_path / "lazyfs.sock")
    planted = shared_tmp / "lazyfs-mounts"
    key = _registry_key(mnt)
    # The attacker owns the old fixed registry: a symlink where root wrote its entry (through
    # `<key>.json.tmp`), and an entry of their own that umount would have trusted.
    bait = subprocess.Popen(["runuser", "-u", ATTACKER, "--", "sleep", "120"],
                            start_new_session=True)  # runuser forks: kill its whole group
    try:
        as_attacker("mkdir", "-m", "777", str(planted))
        as_attacker("ln", "-s", str(canary), str(planted / f"{key}.json.tmp"))
        as_attacker("sh", "-c", f"echo '{{\"pid\": {bait.pid}, \"control\": \"{planted}/evil.sock\"}}'"
                                f" > {planted / (key + '.json')}")
        before = sorted(os.listdir(planted))
        env = root_env(shared_tmp)
        out = _lazyfs(env, "mount", str(backing), str(mnt), "--control", sock)
        assert out.returncode == 0, out.stderr
        assert lazymount.is_mounted(str(mnt))
        (mnt / "f").write_bytes(b"x")
        out = _lazyfs(env, "umount", str(mnt))
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["daemon"] == "exited"
        assert canary.read_text() == "root's own file\n"
        assert sorted(os.listdir(planted)) == before and bait.poll() is None
        # Pointed at the attacker's directory explicitly, root refuses it in one line.
        env["LAZYFS_RUN_DIR"] = str(planted)
        out = _lazyfs(env, "mount", str(backing), str(mnt), "--control", sock)
        assert out.returncode == 1
        assert f"is owned by uid {attacker.pw_uid}" in out.stderr and out.stderr.count("\n") == 1
        assert not lazymount.is_mounted(str(mnt)) and canary.read_text() == "root's own file\n"
    finally:
        os.killpg(bait.pid, signal.SIGKILL)
        bait.wait()
        if lazymount.is_mounted(str(mnt)):
            lazymount.unmount(str(mnt))


@pytest.mark.fuse
def test_a_crashed_daemons_registry_entry_is_removed(tmp_path, monkeypatch):
    reg = tmp_path / "registry"
    monkeypatch.setenv("LAZYFS_RUN_DIR", str(reg))
    lazymount.registry_dir()
    (reg / "0123456789abcdef.json").write_text('{"pid": 999999999}')  # left by a crashed run
    backing, mnt = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mnt.mkdir()
    sock = str(tmp_path / "c.sock")
    try:
        pid = lazymount.spawn_daemon(lazymount.MountOptions(str(backing), str(mnt), sock))
        assert os.listdir(reg) == [f"{_registry_key(mnt)}.json"]  # the stale entry is gone
        os.kill(pid, signal.SIGKILL)  # this daemon never removes its own entry
        deadline = time.monotonic() + 10
        while lazymount._is_our_daemon(pid) and not lazymount._is_zombie(pid):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert lazymount.unmount(str(mnt))["unmounted"] is True
        assert os.listdir(reg) == []
    finally:
        if lazymount.is_mounted(str(mnt)):
            lazymount.unmount(str(mnt))


def test_a_planted_kch_directory_is_neither_used_nor_trusted(attacker, shared_tmp, monkeypatch,
                                                            canary):
    kch = shared_tmp / "kch"
    as_attacker("mkdir", "-m", "777", str(kch))
    as_attacker("mkdir", str(kch / "20261122T063015-s7"))
    as_attacker("ln", "-s", str(canary.parent), str(shared_tmp / "kch-link"))
    # The old layout, /tmp/kch/<run>: refused, since the attacker can swap what is below.
    with pytest.raises(UnsafePathError, match=f"{kch} is owned by uid {attacker.pw_uid}"):
        NetnsProvider(kch / "20261122T063016-s7", 1).up()
    with pytest.raises(FileExistsError, match="not a directory"):
        NetnsProvider(shared_tmp / "kch-link", 1).up()
    # Now the runner's way: a fresh private directory.
    monkeypatch.setattr(tempfile, "tempdir", str(shared_tmp))
    provider = NetnsProvider(None, 2, prefix="kch-20261122T063015-s7-")
    hosts = provider.up()
    try:
        d = provider.cluster_dir
        assert d.parent == shared_tmp and d.name.startswith("kch-20261122T063015-s7-")
        st = os.lstat(d)
        assert st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o700
        assert hosts[1].remote.run(["true"]).ok
        assert as_attacker("ls", str(d), check=False).returncode != 0
        assert as_attacker("touch", str(d / "n1" / "sshd" / "sshd_config"),
                           check=False).returncode != 0
        assert as_attacker("cat", str(d / "ssh" / "id_ed25519"), check=False).returncode != 0
    finally:
        provider.down()
    assert not os.path.lexists(d)  # removed by down()
    assert sorted(os.listdir(kch)) == ["20261122T063015-s7"] and sorted(
        os.listdir(shared_tmp)) == ["kch", "kch-link"]
    assert canary.read_text() == "root's own file\n"


# -- attack 5: root's outputs at names another user planted ----------------------------------

# A Jepsen Kafka history (one send, acknowledged at offset 0, and a poll that reads it).
JEPSEN_KAFKA = (
    "{:index 0, :time 0, :process 0, :type :invoke, :f :txn, :value [[:send :x 1]]}\n"
    "{:index 1, :time 1, :process 0, :type :ok, :f :txn, :value [[:send :x [0 1]]]}\n"
    "{:index 2, :time 2, :process 1, :type :invoke, :f :txn, :value [[:poll]]}\n"
    "{:index 3, :time 3, :process 1, :type :ok, :f :txn, :value [[:poll {:x [[0 1]]}]]}\n")


def _fingerprint(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _as_attackers(path: Path, text: str) -> Path:
    """A file of the attacker's, with `text`."""
    done = subprocess.run(["runuser", "-u", ATTACKER, "--", "sh", "-c", f"cat > {path}"],
                          input=text, text=True, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return path


def test_a_planted_translation_folder_is_refused_and_the_run_it_names_kept(
        attacker, shared_tmp, tmp_path, capsys):
    """`harness check h.edn` writes its translation to h.kafka/: planted as a link to one of
    root's run folders, it had that run's history.jsonl and test.json replaced."""
    run = run_folder(tmp_path, config={"topic": {"partitions": 1}})
    before = _fingerprint(run)
    history = _as_attackers(shared_tmp / "h.edn", JEPSEN_KAFKA)
    as_attacker("ln", "-s", str(run), str(shared_tmp / "h.kafka"))
    assert cli.main(["check", str(history), "--in-process"]) == 3
    assert "h.kafka is a symlink" in capsys.readouterr().err
    assert _fingerprint(run) == before
    # a real folder of theirs at the name: refused too (they could swap it for a link later)
    (shared_tmp / "h.kafka").unlink()
    as_attacker("mkdir", "-m", "755", str(shared_tmp / "h.kafka"))
    assert cli.main(["check", str(history), "--in-process"]) == 3
    assert f"owned by uid {attacker.pw_uid}" in capsys.readouterr().err
    assert os.listdir(shared_tmp / "h.kafka") == []
    # root's own history in root's own folder is translated and checked as before
    mine = tmp_path / "mine.edn"
    mine.write_text(JEPSEN_KAFKA)
    assert cli.main(["check", str(mine), "--in-process"]) != 3  # a verdict, not an error
    assert (tmp_path / "mine.kafka" / "results.json").is_file()


def test_a_planted_link_at_the_linearizability_page_is_replaced_not_written_through(
        attacker, shared_tmp, canary, capsys):
    kv = ROOT / "tests" / "data" / "kv" / "knossos-invalid.edn"
    history = _as_attackers(shared_tmp / "h.edn", kv.read_text())
    page = shared_tmp / "h.linearizability.html"
    as_attacker("ln", "-s", str(canary), str(page))
    assert cli.main(["check", str(history), "--model", "kv", "--in-process"]) == 1
    assert canary.read_text() == "root's own file\n"
    assert not page.is_symlink() and "<html" in page.read_text()


def test_planted_links_at_a_reports_timeline_and_plots_are_replaced_not_written_through(
        attacker, shared_tmp, canary):
    """`harness report` on a run folder another user controls (a copy they handed over)."""
    run = write_run_folder(shared_tmp / "run")
    subprocess.run(["chown", "-R", f"{ATTACKER}:", str(run)], check=True)
    names = ["timeline.html", "latency.png", "throughput.png", "loss.png", "partitions.png",
             "lag.png", "unseen.png"]
    for name in names:
        as_attacker("ln", "-s", str(canary), str(run / name))
    assert cli.main(["report", str(run)]) == 0
    assert canary.read_text() == "root's own file\n"
    written = [n for n in names if (run / n).is_file() and not (run / n).is_symlink()]
    assert {"timeline.html", "latency.png", "throughput.png"} <= set(written), written


def test_a_results_root_or_test_folder_of_another_user_is_refused(attacker, shared_tmp, canary):
    config = load_config(sets=["name=t", "seed=7"])
    # results/<name> planted in a shared results root (sticky, like /tmp): never followed
    results = shared_tmp / "results"
    results.mkdir(mode=0o1777)
    results.chmod(0o1777)
    as_attacker("ln", "-s", str(canary.parent), str(results / "t"))
    with pytest.raises(UnsafePathError, match="is a symlink"):
        store.new_run(results, typed(config), [])
    assert sorted(os.listdir(canary.parent)) == ["canary"]
    # a results root the attacker owns: refused, whatever is below it
    theirs = shared_tmp / "theirs"
    as_attacker("mkdir", "-m", "755", str(theirs))
    with pytest.raises(UnsafePathError, match=f"owned by uid {attacker.pw_uid}"):
        store.new_run(theirs, typed(config), [])
    assert os.listdir(theirs) == []


# -- a full disk -----------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path) -> None:
    with open(disk / "filler", "ab", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC


def _errors(err: str) -> int:
    """Lines of stderr that are not the checker's stage timings ("[checker] ...")."""
    return sum(not line.startswith("[checker] ") for line in err.splitlines())


def test_a_full_disk_is_one_line_exit_3_and_leaves_nothing_half_written(small_disk, capsys,
                                                                        monkeypatch):
    run = run_folder(small_disk)
    assert check_path(run, backend="reference")["valid"] is True
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    capsys.readouterr()  # the first check's stage timings
    # Full before the check starts: the tables cannot be written.
    fill(small_disk)
    assert checkers_main.main([str(run)]) == 3
    err = capsys.readouterr().err
    assert _errors(err) == 1 and "No space left on device" in err
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
    # Full just when the results are written: the old results stay, no temporary is left.
    (small_disk / "filler").unlink()
    real = check_mod._loss_summary

    def fill_then_summarise(loss):  # the loss table is written, the results are next
        fill(small_disk)
        return real(loss)
    monkeypatch.setattr(check_mod, "_loss_summary", fill_then_summarise)
    monkeypatch.setattr("checkers.check.check_path",
                        lambda p, **kw: check_path(p, backend="reference"))
    assert cli.main(["check", str(run)]) == 3
    err = capsys.readouterr().err
    assert _errors(err) == 1 and "harness: error: " in err and "No space" in err
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before  # neither file replaced


# -- two simultaneous runs with the same seed -----------------------------------------------


# Slow (39 s): two whole runs with their checks; the tests above hold the results root's
# other hazards in the default run.
@pytest.mark.slow
@pytest.mark.fuse
def test_two_simultaneous_runs_with_the_same_seed_both_complete_valid(tmp_path, shared_tmp):
    results = tmp_path / "results"
    env = {**root_env(shared_tmp), "HARNESS_RESULTS": str(results)}
    cmd = [sys.executable, "-m", "harness.cli", "run", "--config", "fast", "--nodes", "4",
           "--time-limit", "6", "--nemesis", "kill", "--seed", "11",
           "--set", "workload.final_read_timeout=40"]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for _ in range(2)]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=540)[0])
        except subprocess.TimeoutExpired:
            p.kill()
            outs.append(p.communicate()[0])
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, out[-3000:]
    runs = sorted(p for p in (results / "fast").iterdir())
    assert len(runs) == 2 and runs[0].name != runs[1].name
    for run in runs:
        assert run.name.endswith("-s11")
        verdict = json.loads((run / "results.json").read_text())
        assert verdict["valid"] is True and not verdict.get("errors")
        assert (run / "history.jsonl").stat().st_size > 0
    assert (results / "latest").resolve() in runs
    assert not [n for n in os.listdir(shared_tmp) if n.startswith("kch-")]  # clusters removed
