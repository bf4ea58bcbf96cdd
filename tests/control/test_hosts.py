"""Hosts and SSH control against real namespaces and real sshds (needs root)."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import paramiko
import pytest
from support.procs import alive

from control import (
    CommandFailed,
    CommandTimeout,
    HostKeyMismatch,
    NetnsProvider,
    Remote,
    Unreachable,
    cleanup_stale,
    keys,
    slots,
)
from control.ssh_provider import SshProvider

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces and sshd need root"),
    pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="openssh-server not installed"),
]

PY = sys.executable  # netns hosts share our filesystem, so the venv runs inside them too
ARGV_JSON = "import json, sys; print(json.dumps(sys.argv[1:]))"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    provider = NetnsProvider(tmp_path_factory.mktemp("kch") / "cluster", 3)
    hosts = provider.up()
    yield provider, hosts
    provider.down()


@pytest.fixture
def hosts(cluster):
    return cluster[1]


def _ns_names(slot: int) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(f"kch-{slot}-")]


def _links(slot: int) -> list[str]:
    return [n for n in os.listdir("/sys/class/net") if n in (f"kchbr{slot}",) or n.startswith(f"kch{slot}v")]


def _sshds_of(cluster_dir: Path) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(str(cluster_dir).encode() + b"/" in a for a in argv):
            found.append(int(pid))
    return found



def _forward_rules(slot: int) -> list[str]:
    out = subprocess.run(["iptables", "-w", "-S", "FORWARD"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if f"kch-slot-{slot}" in line]


# -- commands ------------------------------------------------------------------------------


def test_run_returns_rc_stdout_stderr(hosts):
    n1 = hosts[0]
    result = n1.remote.run("echo out; echo err >&2; exit 3", check=False)
    assert (result.rc, result.stdout, result.stderr) == (3, "out\n", "err\n")
    with pytest.raises(CommandFailed, match=r"on n1: .* exited 3: err"):
        n1.remote.run("echo err >&2; exit 3")


def test_each_host_has_its_own_address_and_hostname_space(hosts):
    for host in hosts:
        out = host.remote.run(["ip", "-4", "-o", "addr", "show", "eth0"]).stdout
        assert f"inet {host.address}/24" in out


def test_nasty_arguments_arrive_verbatim(hosts):
    nasty = ["a b", "", "'", '"', "$(touch /tmp/kch-pwned)", "`id`", "; rm -rf /", "*", "\\n",
             "line1\nline2", "-x", "--", "ünïcødé", "$HOME", "a'b\"c", "&&", "|", ">out"]
    out = hosts[0].remote.run([PY, "-c", ARGV_JSON, *nasty]).stdout
    assert json.loads(out) == nasty
    assert not Path("/tmp/kch-pwned").exists()


def test_stdin_and_large_output_do_not_deadlock(hosts):
    payload = os.urandom(3 * 1024 * 1024).hex()  # 6 MiB: far more than any channel window
    result = hosts[0].remote.run(["sh", "-c", "cat; cat >&2 </dev/null; head -c 1000000 /dev/zero >&2"],
                                 input=payload)
    assert result.stdout == payload
    assert len(result.stderr) == 1_000_000


def test_timeout_raises(hosts):
    start = time.monotonic()
    with pytest.raises(CommandTimeout, match="n2"):
        hosts[1].remote.run(["sleep", "30"], timeout=0.5)
    assert time.monotonic() - start < 20


def test_connection_is_reused_and_reconnects(hosts):
    remote = hosts[0].remote
    remote.run(["true"])
    transport = remote._client.get_transport()
    remote.run(["true"])
    assert remote._client.get_transport() is transport
    transport.close()  # the connection dies under us
    assert remote.run(["echo", "back"]).stdout == "back\n"
    assert remote._client.get_transport() is not transport


def test_lost_connection_is_reported_then_recovered(hosts):
    remote = hosts[2].remote
    # The shell's parent is the sshd process serving our connection: kill it mid-command.
    with pytest.raises(Unreachable, match=r"host n3 .*connection lost running"):
        remote.run("echo started; kill -9 $PPID; sleep 5")
    assert remote.run(["echo", "again"]).stdout == "again\n"
    assert remote.run("kill -9 $$", check=False).rc == -1  # killed by a signal, link intact


# -- daemons -------------------------------------------------------------------------------


def test_daemon_lifecycle(hosts):
    n2 = hosts[1].remote
    log = hosts[1].log_dir / "d1.log"
    pid = n2.start_daemon("d1", ["sh", "-c", 'echo "hello $GREETING"; exec sleep 300'], log,
                          env={"GREETING": "a b'c"})
    assert n2.is_running("d1") and n2.pid("d1") == pid
    # The pid is the real process (now exec'd into sleep), leading its own session.
    stat = n2.run(["cat", f"/proc/{pid}/stat"]).stdout
    assert "(sleep)" in stat
    fields = stat.rsplit(")", 1)[1].split()
    assert int(fields[2]) == pid and int(fields[3]) == pid  # pgrp, session
    with pytest.raises(Exception, match="already running"):
        n2.start_daemon("d1", ["sleep", "1"], log)

    assert n2.signal("d1", "STOP")
    assert n2.run(["sh", "-c", f"cut -d')' -f2 /proc/{pid}/stat | cut -d' ' -f2"]).stdout.strip() == "T"
    assert n2.signal("d1", signal.SIGCONT)
    assert n2.signal("d1", "TERM")
    deadline = time.monotonic() + 10
    while n2.is_running("d1") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not n2.is_running("d1")
    assert not n2.signal("d1", "KILL")
    assert n2.run(["cat", str(log)]).stdout == "hello a b'c\n"


def test_stop_all_stops_a_daemon_that_leads_no_process_group(hosts):
    """A daemon stopped before its `setsid` has no process group of its own yet: stop_all
    signals the process itself then, so the TERM reaches it (a group signal alone missed it
    and left it running to the KILL). A pid file naming a process in its shell's group is
    that state, held still."""
    n3 = hosts[2].remote
    pid = n3.run(["sh", "-c", f"sleep 300 >/dev/null 2>&1 & echo $! > "
                  f"{shlex.quote(str(hosts[2].run_dir))}/grouped.pid; echo $!"]).stdout.strip()
    assert n3.is_running("grouped")
    assert n3.stop_all(timeout=5) == []
    assert not n3.is_running("grouped")
    # gone, or a zombie its new parent has not reaped yet
    live = f"grep -q '^[0-9]* (.*) [^Z]' /proc/{pid}/stat 2>/dev/null && echo alive || echo gone"
    assert n3.run(["sh", "-c", live]).stdout == "gone\n"


def test_stop_all_kills_what_ignores_sigterm(hosts):
    n3 = hosts[2].remote
    n3.start_daemon("polite", ["sleep", "300"], hosts[2].log_dir / "polite.log")
    n3.start_daemon("stubborn", ["sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"],
                    hosts[2].log_dir / "stubborn.log")
    assert n3.stop_all(timeout=1) == ["stubborn"]
    assert not n3.is_running("polite") and not n3.is_running("stubborn")
    assert n3.run(["ls", str(hosts[2].run_dir)]).stdout == ""


def test_stop_daemon_returns_only_once_the_daemon_has_ended(hosts):
    n3 = hosts[2].remote
    log = hosts[2].log_dir / "slow.log"
    # Takes 0.5 s to end after SIGTERM: a stop that only signalled would return before it.
    n3.start_daemon("slow", ["sh", "-c", "trap 'sleep 0.5; exit 0' TERM; while :; do sleep 0.1; done"],
                    log)  # fmt: skip
    assert n3.stop_daemon("slow") is False and not n3.is_running("slow")
    n3.start_daemon("slow", ["sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"], log)
    assert n3.stop_daemon("slow", timeout=0.5) is True and not n3.is_running("slow")
    assert n3.stop_daemon("slow") is False  # not running: nothing to do


def test_daemon_name_is_validated(hosts):
    with pytest.raises(ValueError, match="daemon name"):
        hosts[0].remote.start_daemon("../x", ["true"], "/tmp/x.log")


# -- files ---------------------------------------------------------------------------------


def test_put_get_and_fetch_dir(hosts, tmp_path):
    n1 = hosts[0]
    blob = os.urandom(200_000)
    (tmp_path / "blob").write_bytes(blob)
    remote_dir = n1.data_dir / "tree"
    n1.remote.run(["mkdir", "-p", str(remote_dir / "a" / "b"), str(remote_dir / "empty")])
    n1.remote.put(tmp_path / "blob", remote_dir / "a" / "b" / "blob.bin")
    n1.remote.run(["sh", "-c", f"echo top > {remote_dir}/top.txt; ln -s top.txt {remote_dir}/link"])
    n1.remote.get(remote_dir / "top.txt", tmp_path / "got" / "top.txt")
    assert (tmp_path / "got" / "top.txt").read_text() == "top\n"

    count = n1.remote.fetch_dir(remote_dir, tmp_path / "copy")
    assert count == 2
    assert (tmp_path / "copy" / "a" / "b" / "blob.bin").read_bytes() == blob
    assert (tmp_path / "copy" / "top.txt").read_text() == "top\n"
    assert (tmp_path / "copy" / "empty").is_dir()
    assert not (tmp_path / "copy" / "link").exists()
    # what a power-off leaves out of its measurement (nemesis/kinds/vm.py: Kafka's indexes)
    assert n1.remote.fetch_dir(remote_dir, tmp_path / "some", (".bin",)) == 1
    assert (tmp_path / "some" / "top.txt").exists()
    assert not (tmp_path / "some" / "a" / "b" / "blob.bin").exists()


# -- security and isolation ---------------------------------------------------------------


def test_wrong_host_key_fails_closed(cluster, tmp_path):
    provider, hosts = cluster
    impostor = keys.generate_ed25519(tmp_path / "impostor", "impostor")
    bad_known = tmp_path / "known_hosts"
    keys.write_known_hosts(bad_known, [(h.address, 22, impostor.public_line) for h in hosts])
    endpoint = dataclasses.replace(hosts[0].remote.endpoint, known_hosts=bad_known)
    with pytest.raises(HostKeyMismatch, match=r"n1 \(10\.213\.\d+\.11:22\)"):
        Remote(endpoint).run(["touch", "/tmp/kch-should-not-run"])
    assert not Path("/tmp/kch-should-not-run").exists()

    empty_known = tmp_path / "empty_known_hosts"
    empty_known.write_text("")
    endpoint = dataclasses.replace(hosts[0].remote.endpoint, known_hosts=empty_known)
    with pytest.raises(HostKeyMismatch, match="not found in known_hosts"):
        Remote(endpoint).connect()


def test_only_public_key_auth_is_offered(hosts):
    transport = paramiko.Transport((hosts[0].address, 22))
    try:
        transport.start_client(timeout=5)
        with pytest.raises(paramiko.BadAuthenticationType) as err:
            transport.auth_none("root")
        assert err.value.allowed_types == ["publickey"]
    finally:
        transport.close()


def test_hosts_cannot_reach_beyond_their_subnet(hosts):
    n1 = hosts[0]
    routes = n1.remote.run(["ip", "-4", "route"]).stdout
    assert "default" not in routes
    probe = textwrap.dedent("""
        import socket
        s = socket.socket(); s.settimeout(2)
        try:
            s.connect(("192.0.2.1", 80)); print("connected")
        except OSError as e:
            print(e.errno)
    """)
    assert n1.remote.run([PY, "-c", probe]).stdout.strip() == "101"  # ENETUNREACH
    listening = n1.remote.run(["ss", "-Hltn"]).stdout.split()
    assert f"{n1.address}:22" in listening and "0.0.0.0:22" not in listening


def test_unreachable_host_gives_a_clear_error(hosts):
    endpoint = dataclasses.replace(hosts[0].remote.endpoint, name="ghost",
                                   address=hosts[0].address.rsplit(".", 1)[0] + ".250")
    with pytest.raises(Unreachable, match=r"host ghost \(10\.213\.\d+\.250:22\) unreachable: .*timed out"):
        Remote(endpoint, connect_timeout=1).run(["true"])
    refused = dataclasses.replace(hosts[0].remote.endpoint, port=2222)
    with pytest.raises(Unreachable, match=r"host n1 \(.*:2222\) unreachable: .*Connection refused|Unable to connect"):
        Remote(refused, connect_timeout=2).run(["true"])


# -- lifecycle -----------------------------------------------------------------------------


CRASHER = """
import sys, time
from pathlib import Path
from control import NetnsProvider
p = NetnsProvider(Path(sys.argv[1]), 2)
hosts = p.up()
pid = hosts[0].remote.start_daemon("sleeper", ["sleep", "600"], hosts[0].log_dir / "s.log")
print(p.slot, pid, flush=True)
time.sleep(600)
"""


def test_cleanup_after_a_crashed_run(cluster, tmp_path):
    live_provider, live_hosts = cluster
    cluster_dir = tmp_path / "crashed"
    proc = subprocess.Popen([sys.executable, "-c", CRASHER, str(cluster_dir)],
                            stdout=subprocess.PIPE, text=True)
    try:
        slot, daemon = map(int, proc.stdout.readline().split())
    finally:
        proc.send_signal(signal.SIGKILL)  # no down(), no finally blocks: a real crash
        proc.wait()
    assert len(_ns_names(slot)) == 2 and _links(slot) and _sshds_of(cluster_dir)
    assert alive(daemon)
    assert _forward_rules(slot)

    cleaned = cleanup_stale()

    assert slot in cleaned and live_provider.slot not in cleaned
    assert _ns_names(slot) == [] and _links(slot) == [] and _forward_rules(slot) == []
    assert _sshds_of(cluster_dir) == []
    assert not alive(daemon)
    # The live cluster of this process was left alone.
    assert live_hosts[0].remote.run(["echo", "alive"]).stdout == "alive\n"
    assert cleanup_stale() == []


FUSE_FS = "import mfusepy, sys; mfusepy.FUSE(mfusepy.Operations(), sys.argv[1], foreground=True)"

FUSE_CRASHER = """
import subprocess, sys, time
from pathlib import Path
from control import NetnsProvider
fs, cluster_dir = sys.argv[1], Path(sys.argv[2])
p = NetnsProvider(cluster_dir, 1)
(h,) = p.up()
# One mount inside the host (over SSH, as nodes do), one in this namespace under the work dir.
inner = h.remote.start_daemon("fs", [sys.executable, "-c", fs, str(h.data_dir)], h.log_dir / "fs.log")
outer_dir = cluster_dir / "outer"
outer_dir.mkdir()
outer = subprocess.Popen([sys.executable, "-c", fs, str(outer_dir)], start_new_session=True,
                         stderr=subprocess.DEVNULL).pid
h.remote.run(f"for i in $(seq 100); do mountpoint -q {h.data_dir} && exit 0; sleep 0.1; done; exit 1")
while str(outer_dir) not in Path("/proc/self/mounts").read_text():
    time.sleep(0.05)
print(p.slot, inner, outer, flush=True)
time.sleep(600)
"""


@pytest.mark.fuse
@pytest.mark.skipif(not Path("/dev/fuse").exists(), reason="needs /dev/fuse")
def test_cleanup_removes_fuse_mounts_of_a_crashed_run(tmp_path):
    cluster_dir = tmp_path / "fused"
    proc = subprocess.Popen([sys.executable, "-c", FUSE_CRASHER, FUSE_FS, str(cluster_dir)],
                            stdout=subprocess.PIPE, text=True)
    try:
        slot, inner, outer = map(int, proc.stdout.readline().split())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert alive(inner) and alive(outer)
    assert str(cluster_dir / "outer") in Path("/proc/self/mounts").read_text()

    assert slot in cleanup_stale()

    assert str(cluster_dir) not in Path("/proc/self/mounts").read_text()
    assert not alive(inner)
    deadline = time.monotonic() + 10  # the outer daemon exits by itself once unmounted
    while alive(outer) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(outer)


def test_cleanup_when_nothing_exists_is_harmless():
    cleanup_stale()
    cleanup_stale()


def test_up_down_is_idempotent_and_leaves_nothing(tmp_path):
    provider = NetnsProvider(tmp_path / "c", 2)
    hosts = provider.up()
    slot = provider.slot
    assert hosts[1].remote.run(["hostname", "-I"]).stdout.split() == [hosts[1].address]
    provider.down()
    provider.down()
    assert _ns_names(slot) == [] and _links(slot) == [] and _forward_rules(slot) == []
    assert _sshds_of(tmp_path / "c") == []
    # The same directory can host a fresh cluster (a new run reuses the name).
    with NetnsProvider(tmp_path / "c", 1) as again:
        assert again[0].remote.run(["ls", str(again[0].data_dir)]).stdout == ""


def test_up_refuses_a_foreign_directory(tmp_path):
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "thesis.tex").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a kch cluster directory"):
        NetnsProvider(tmp_path / "precious", 1).up()
    assert (tmp_path / "precious" / "thesis.tex").read_text() == "keep me"


def test_slots_are_not_shared_between_live_clusters(cluster, tmp_path):
    with NetnsProvider(tmp_path / "second", 1) as second:
        assert slots.host_address(cluster[0].slot, 1) != second[0].address
        assert second[0].remote.run(["true"]).ok


# -- the ssh provider, against real sshds --------------------------------------------------


def test_ssh_provider_drives_inventory_hosts(cluster, tmp_path):
    provider, hosts = cluster
    work = tmp_path / "sshwork"
    inventory = tmp_path / "inventory.toml"
    shutil.copy(provider.ssh_dir / "known_hosts", tmp_path / "known_hosts")
    lines = [
        "[defaults]",
        f'key_file = "{provider.ssh_dir / "id_ed25519"}"',
        'known_hosts = "known_hosts"',  # relative to the inventory file
        f'work_dir = "{work}"',
    ]
    for h in hosts[:2]:
        lines += ["[[hosts]]", f'name = "vm-{h.name}"', f'address = "{h.address}"']
    inventory.write_text("\n".join(lines) + "\n")

    ssh = SshProvider(inventory)
    vms = ssh.up()
    try:
        assert [v.name for v in vms] == ["vm-n1", "vm-n2"]
        assert vms[1].remote.run(["hostname", "-I"]).stdout.split() == [hosts[1].address]
        napper = vms[0].remote.start_daemon("napper", ["sleep", "300"], vms[0].log_dir / "napper.log")
        assert vms[0].remote.is_running("napper") and alive(napper)
    finally:
        ssh.down()
    assert not alive(napper)
