"""`harness` that gets SIGTERM (kill, systemd stopping a unit, CI cancelling a job) tears down
as after Ctrl-C and exits 143: a `harness run` stops its nodes and removes its namespaces,
links and root iptables rule. Before, it died at once and left all of it for the next run."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_runner import _leftovers

from control import netns, slots

ROOT = Path(__file__).resolve().parents[2]


def test_sigterm_is_a_ctrl_c_that_exits_143(tmp_path):
    """Outside asyncio (`harness serve` waits in its HTTP server): the KeyboardInterrupt path."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "HARNESS_RESULTS": str(tmp_path), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "serve", "--port", str(port)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert "serving" in proc.stdout.readline()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 143 and out.strip() == "harness: terminated", out


# A main coroutine whose teardown starts a task it does not wait for, as a client's close
# can (a retry, a late batch): asyncio cancels that task only if the teardown ran in the main
# task, before asyncio.run's final sweep of what is left.
_TEARDOWN = """
import asyncio, signal, sys
from checkers.exitcodes import guarded, run_interruptible, terminate_as_interrupt

async def main():
    print("ready", flush=True)
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        if sys.argv[2] != "swallowed":
            raise
    finally:
        asyncio.get_running_loop().create_task(asyncio.sleep(30))
        await asyncio.sleep(0.2)
        print("teardown done", flush=True)

if sys.argv[1] == "ignored":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
terminate_as_interrupt()
sys.exit(guarded("t", lambda: run_interruptible(main()) or 0))
"""


@pytest.mark.parametrize(("sigint", "cancel"), [("default", "raised"), ("ignored", "raised"),
                                               ("ignored", "swallowed")])
def test_sigterm_cancels_an_asyncio_run_whose_teardown_then_runs_in_its_task(sigint, cancel):
    """`harness run` put in the background by a script (`nohup ... &`) inherits SIGINT
    ignored, so asyncio.run has no Ctrl-C handler to cancel its task with: a SIGTERM raised
    KeyboardInterrupt wherever the loop was, and the teardown ran in asyncio's last sweep,
    leaving what it started destroyed pending. Either way the teardown now runs in the task and nothing is left; a
    run that swallows the cancellation still ends as terminated (no check after it)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", _TEARDOWN, sigint, cancel], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 143, out
    assert out.splitlines() == ["teardown done", "t: terminated"], out


def _slot_of(marker: str) -> int | None:
    """The host slot whose namespaces run this run's processes (its sshds name the cluster
    directory, which is named after the run)."""
    for ns in netns.existing_namespaces():
        m = slots.NETNS_RE.match(ns)
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
        for pid in pids.split():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if m and marker in cmd:
                return int(m.group(1))
    return None


def _slot_leftovers(slot: int) -> list[str]:
    """The slot's namespaces, links and root FORWARD rule, whatever is still there."""
    found = [ns for ns in netns.existing_namespaces()
             if (m := slots.NETNS_RE.match(ns)) and int(m.group(1)) == slot]
    found += [link for link in netns.existing_links()
              if (m := slots.LINK_RE.match(link)) and int(m.group(1) or m.group(2)) == slot]
    rules = subprocess.run(["iptables", "-w", "-S", "FORWARD"], capture_output=True,
                           text=True).stdout
    return found + [r for r in rules.splitlines() if slots.rule_comment(slot) in r.split()]


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.netns
def test_a_sigterm_mid_workload_tears_down_and_exits_143(tmp_path):
    env = {**os.environ, "HARNESS_RESULTS": str(tmp_path)}
    cmd = [sys.executable, "-m", "harness.cli", "run", "--config", "fast", "--time-limit", "60",
           "--nemesis", "kill,partition", "--nodes", "4", "--seed", "3"]
    # SIGINT ignored, as a run a script starts with `&` has it: the harder case
    # (asyncio.run then has no handler of its own), which left tasks destroyed pending before.
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, preexec_fn=_ignore_sigint)
    try:
        history = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and history is None:
            found = list(tmp_path.glob("*/*/history.jsonl"))
            if found and found[0].stat().st_size > 50_000:  # mid-workload
                history = found[0]
            time.sleep(0.5)
        assert history is not None, "the run never got going"
        marker = history.parent.name
        slot = _slot_of(marker)
        assert slot is not None and _slot_leftovers(slot), "the run's hosts should be up"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 143, out[-3000:]
    assert "harness: terminated" in out and "Traceback" not in out, out[-3000:]
    assert not _leftovers(marker), "a terminated run must stop its nodes"
    assert not _slot_leftovers(slot), "a terminated run must remove its hosts and its rule"
    assert (history.parent / "nodes").is_dir(), "the nodes' logs and data are still collected"
